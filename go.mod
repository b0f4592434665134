module github.com/ferrylabs/ferry

go 1.26.8
