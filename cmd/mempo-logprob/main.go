// Command mempo-logprob is the logprob stage of a MemPO iteration (DESIGN.md §7).
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "mempo-logprob: this stage is not built yet (issue 6)")
	os.Exit(1)
}
