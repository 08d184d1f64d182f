// Command emq is EMQ's one binary: the broker and the tools around it.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "emq:", err)
		os.Exit(1)
	}
}
