package lifecycle

// PutFork writes a fork task.
func (s *BoltStore) PutFork(r *ForkRecord) error { return put(s, bucketForks, r.ID, r) }

// Fork reads a fork task.
func (s *BoltStore) Fork(id string) (*ForkRecord, error) { return get[ForkRecord](s, bucketForks, id) }

// Forks reads every fork task.
func (s *BoltStore) Forks() ([]*ForkRecord, error) { return all[ForkRecord](s, bucketForks) }

// UpdateFork modifies a fork task atomically.
func (s *BoltStore) UpdateFork(id string, fn func(*ForkRecord) error) (*ForkRecord, error) {
	return update(s, bucketForks, id, fn)
}

// DeleteFork forgets a fork task.
func (s *BoltStore) DeleteFork(id string) error { return del(s, bucketForks, id) }
