// Command mempo-update is the update stage of a MemPO iteration (DESIGN.md §7).
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "mempo-update: this stage is not built yet (issue 7)")
	os.Exit(1)
}
