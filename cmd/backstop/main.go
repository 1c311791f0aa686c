// Command backstop is the Backstop binary: worker, CLI and (later) server.
package main

import (
	"os"

	"github.com/backstophq/backstop/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
