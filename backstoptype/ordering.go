package backstoptype

// Gap is a run of sequences of an ordering key that never arrived: From and
// To inclusive. It is reported with the first task released after it.
type Gap struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
}
