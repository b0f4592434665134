package store_test

import (
	"testing"

	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/internal/store/storetest"
)

func TestMemStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return store.NewMemStore() })
}
