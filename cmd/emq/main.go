// Command emq is EMQ's one binary: the broker and the tools around it.
package main

import (
	"errors"
	"fmt"
	"os"
)

func main() {
	if err := newRoot().Execute(); err != nil {
		var e exitError
		if errors.As(err, &e) {
			fmt.Fprintln(os.Stderr, e.err)
			os.Exit(e.code)
		}
		fmt.Fprintln(os.Stderr, "emq:", err)
		os.Exit(1)
	}
}

// exitError is an error that ends emq with its own exit status and says
// err as it is.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }
