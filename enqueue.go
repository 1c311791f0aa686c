package backstop

// Validate checks params exactly as EnqueueMany would, and writes nothing:
// a dry run for callers that must refuse a whole input before any of it is
// written (the CLI's --batch-file). With several params, the error is a
// *BatchError naming the first bad one.
func (c *Client) Validate(params ...EnqueueParams) error {
	_, err := c.e.PrepareAll(params)
	return err
}
