package engine

import "github.com/backstophq/backstop/store"

// FairQueue makes claims in a queue rotate across the values of an
// attribute (store/fair.go, docs/fairness.md).
type FairQueue = store.FairQueue

// MaxFairWeight bounds a value's weight.
const MaxFairWeight = 1000

// ValidateFair checks a fair queue before it is stored; the error names
// the field.
func ValidateFair(f FairQueue) error {
	if err := ValidName(f.Queue); err != nil {
		return Invalid("queue", "%v", err)
	}
	if !ValidAttrKey(f.By) {
		return Invalid("by", "%q must be an attribute key: 1-64 characters of letters, digits, '_', '.' or '-', starting with a letter or '_'", f.By)
	}
	for v, w := range f.Weights {
		if w < 1 || w > MaxFairWeight {
			return Invalid("weights", "%s=%d: want a whole number from 1 to %d", v, w, MaxFairWeight)
		}
		if err := CheckText("weights", v); err != nil {
			return err
		}
	}
	return nil
}
