package format

// WriteFile writes rows as one shard at path (which must not exist) and returns the
// file's Output. It is the whole life of a Writer for a stage that has its rows in
// memory; on any error the partial file is removed, so nothing half-written remains.
func WriteFile[R Row](path string, rows []R, opts ...Option) (Output, error) {
	w, err := Create[R](path, opts...)
	if err != nil {
		return Output{}, err
	}
	if err := w.Write(rows...); err != nil {
		w.Abort()
		return Output{}, err
	}
	if _, err := w.Close(); err != nil {
		return Output{}, err
	}
	return w.Output(), nil
}
