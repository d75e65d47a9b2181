// Command mempo-rollout is the rollout stage of a MemPO iteration (DESIGN.md §7).
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "mempo-rollout: this stage is not built yet (issue 5)")
	os.Exit(1)
}
