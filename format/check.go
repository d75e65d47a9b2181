package format

import (
	"errors"
	"fmt"
)

// ErrInvariant marks a row that breaks a promise its kind makes to the stages that read
// it (see Rollout.Check).
var ErrInvariant = errors.New("row invariant violated")

// Check reports the first invariant of a rollouts row that a later stage relies on: the
// memory span lies inside the response, and observation_ids hold the encoded observation
// — non-empty exactly when the observation is, since the memory pass stitches P_full's
// history from them (a tokenizer-free check; the rollout stage writes the encoding).
func (r *Rollout) Check() error {
	if r.MemStart < 0 || r.MemEnd < r.MemStart || int(r.MemEnd) > len(r.ResponseIDs) {
		return fmt.Errorf("memory span [%d, %d) outside the response's %d tokens: %w", r.MemStart, r.MemEnd, len(r.ResponseIDs), ErrInvariant)
	}
	if (r.Observation == "") != (len(r.ObservationIDs) == 0) {
		return fmt.Errorf("observation of %d bytes with %d observation_ids, want ids exactly when there is an observation (re-run the rollout stage): %w",
			len(r.Observation), len(r.ObservationIDs), ErrInvariant)
	}
	return nil
}

// CheckRows reads every row of d and checks the invariants of its kind (only rollouts
// have row invariants so far), naming the shard and row of each violation; at most
// maxErrs violations are listed. The shards' checksums are checked on the way.
func (d *Dataset) CheckRows(maxErrs int) error {
	if d.Manifest.Kind != KindRollouts {
		return nil
	}
	var errs []error
	bad := 0
	for i := range d.Len() {
		r, err := OpenShard[Rollout](d, i)
		if err != nil {
			return err
		}
		for j := 0; r.Next(); j++ {
			row := r.Row()
			if err := row.Check(); err != nil {
				if bad++; bad <= maxErrs {
					errs = append(errs, fmt.Errorf("%s: row %d (uid %s sample %d turn %d): %w", d.Path(i), j, row.UID, row.Sample, row.Turn, err))
				}
			}
		}
		err = r.Err()
		r.Close()
		if err != nil {
			return err
		}
	}
	if bad > maxErrs {
		errs = append(errs, fmt.Errorf("%s: %d more rows violate an invariant: %w", d.Dir, bad-maxErrs, ErrInvariant))
	}
	return errors.Join(errs...)
}
