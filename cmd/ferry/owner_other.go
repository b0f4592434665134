//go:build !unix

package main

import "go.uber.org/zap"

// warnOthersFolder: file ownership is not checked here.
func warnOthersFolder(string, *zap.Logger) {}
