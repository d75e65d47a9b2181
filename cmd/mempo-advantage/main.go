// Command mempo-advantage is the advantage stage of a MemPO iteration (DESIGN.md §7).
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "mempo-advantage: this stage is not built yet (issue 6)")
	os.Exit(1)
}
