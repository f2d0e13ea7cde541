package decider

// OptFloat is a float that may be unset. The spec gives "unset" its own meaning for
// several thresholds (inherit, or switch the guard off), which no float value can encode
// without a sentinel that a user could type by accident.
type OptFloat struct {
	Value float64
	Set   bool
}

// Some returns a set OptFloat.
func Some(v float64) OptFloat { return OptFloat{Value: v, Set: true} }

// Or returns the value when set, else def.
func (o OptFloat) Or(def float64) float64 {
	if o.Set {
		return o.Value
	}
	return def
}
