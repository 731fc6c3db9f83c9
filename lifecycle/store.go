package lifecycle

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sandboxd/sandboxd/runtime/egress"
)

// Store is the durable state that sandbox labels cannot hold: renewed
// expiry, patched metadata, activity, creation progress, snapshot records,
// pools defined through the API and the secrets tokens derive from. A
// read of a missing record is errNoRecord; fn's error in an update is
// returned as is, nothing written.
type Store interface {
	// InstanceID is this sandboxd's instance id, made once and kept.
	InstanceID() (string, error)
	// Secret is a random secret of this name, made once and kept.
	Secret(name string) ([]byte, error)
	MetaString(key string) (string, error) // "" if absent
	SetMetaString(key, value string) error

	PutSandbox(r *Record) error
	Sandbox(id string) (*Record, error)
	Sandboxes() ([]*Record, error)
	UpdateSandbox(id string, fn func(*Record) error) (*Record, error)
	DeleteSandbox(id string) error

	PutSnapshot(r *SnapshotRecord) error
	Snapshot(id string) (*SnapshotRecord, error)
	Snapshots() ([]*SnapshotRecord, error)
	UpdateSnapshot(id string, fn func(*SnapshotRecord) error) (*SnapshotRecord, error)
	DeleteSnapshot(id string) error

	PutFork(r *ForkRecord) error
	Fork(id string) (*ForkRecord, error)
	Forks() ([]*ForkRecord, error)
	UpdateFork(id string, fn func(*ForkRecord) error) (*ForkRecord, error)
	DeleteFork(id string) error

	Close() error
}

// BoltStore is the Store of one sandboxd: a bbolt file in the state
// directory, so a kill -9 loses nothing committed.
type BoltStore struct {
	db *bolt.DB
}

var _ Store = (*BoltStore)(nil)

var (
	bucketSandboxes = []byte("sandboxes")
	bucketSnapshots = []byte("snapshots")
	bucketForks     = []byte("forks")
	bucketMeta      = []byte("meta")
)

// Record states.
const (
	recordCreating = "creating" // container may be half-made; removed on restart
	recordReady    = "ready"
)

// Record is what sandboxd keeps about one sandbox.
type Record struct {
	ID          string            `json:"id"`
	State       string            `json:"state"`
	ContainerID string            `json:"containerId,omitempty"`
	CreatedAt   time.Time         `json:"createdAt"`
	ExpiresAt   *time.Time        `json:"expiresAt,omitempty"` // nil: manual cleanup
	Metadata    map[string]string `json:"metadata,omitempty"`
	Image       string            `json:"image,omitempty"` // as requested ("" for snapshot restores)
	SnapshotID  string            `json:"snapshotId,omitempty"`
	Platform    *Platform         `json:"platform,omitempty"`
	Entrypoint  []string          `json:"entrypoint,omitempty"`
	// RenewOnAccess is upstream's access.renew.extend.seconds: activity
	// moves the deadline to max(now+RenewOnAccess, current).
	RenewOnAccess int `json:"renewOnAccess,omitempty"`
	// IdleTimeout (seconds) is the server's idle timeout when the sandbox
	// was created; RenewOnAccess replaces it (see expiry.go).
	IdleTimeout int `json:"idleTimeout,omitempty"`
	// LastActivity is persisted every reaper sweep; see persistActivity.
	LastActivity   time.Time `json:"lastActivity,omitempty"`
	ManagedVolumes []string  `json:"managedVolumes,omitempty"`
	Pool           string    `json:"pool,omitempty"`
	// ReadOnlyRootfs sandboxes get files through the agent: Docker's
	// archive API refuses to write to them and cannot see their tmpfs.
	ReadOnlyRootfs bool `json:"readOnlyRootfs,omitempty"`
	// Extensions are the create's (poolRef aside): a fork's sandboxes are
	// made with them, so they keep the source's hardening, nesting and
	// sleep policy.
	Extensions map[string]string `json:"extensions,omitempty"`
	// NetworkPolicy is the egress policy in force (nil: none), enforced
	// by the helper container EgressHelper forwarding allowed names to
	// EgressUpstreams.
	NetworkPolicy   *egress.Policy `json:"networkPolicy,omitempty"`
	EgressHelper    string         `json:"egressHelper,omitempty"`
	EgressUpstreams []string       `json:"egressUpstreams,omitempty"`
	// Sleep is the sandbox's sleep policy (nil: none); Asleep is why it
	// sleeps since AsleepAt ("" while awake). See sleep.go.
	Sleep    *SleepPolicy `json:"sleep,omitempty"`
	Asleep   string       `json:"asleep,omitempty"`
	AsleepAt time.Time    `json:"asleepAt,omitempty"`
}

// SnapshotRecord is a snapshot of a sandbox's filesystem (a committed image).
type SnapshotRecord struct {
	ID        string    `json:"id"`
	SandboxID string    `json:"sandboxId"`
	Name      string    `json:"name,omitempty"`
	State     string    `json:"state"`
	Reason    string    `json:"reason,omitempty"`
	Message   string    `json:"message,omitempty"`
	Image     string    `json:"image"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// storeLockTimeout is how long OpenStore waits for another process's lock
// on the store.
const storeLockTimeout = 2 * time.Second

// OpenStore opens (creating if needed) the store in dir. Only one process
// may hold it: a second sandboxd on the same state directory fails fast.
func OpenStore(dir string) (*BoltStore, error) {
	return openStore(dir, storeLockTimeout)
}

// openStore is OpenStore waiting lockTimeout for the lock (tests shorten
// it).
func openStore(dir string, lockTimeout time.Duration) (*BoltStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create state dir %s: %w", dir, err)
	}
	path := filepath.Join(dir, "state.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockTimeout})
	if err != nil {
		return nil, fmt.Errorf("open store %s (is another sandboxd using this state dir?): %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketSandboxes, bucketSnapshots, bucketForks, bucketMeta} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("init store: %w", err)
	}
	return &BoltStore{db: db}, nil
}

// Close closes the store.
func (s *BoltStore) Close() error { return s.db.Close() }

// Secret returns the store's random secret of the given name, creating it
// on first use. Per-sandbox tokens are derived from it, so they survive a
// restart without being stored anywhere.
func (s *BoltStore) Secret(name string) ([]byte, error) {
	var secret []byte
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketMeta)
		if v := b.Get([]byte(name)); v != nil {
			secret = append([]byte(nil), v...)
			return nil
		}
		secret = make([]byte, 32)
		if _, err := rand.Read(secret); err != nil {
			return err
		}
		return b.Put([]byte(name), secret)
	})
	if err != nil {
		return nil, fmt.Errorf("store secret %s: %w", name, err)
	}
	return secret, nil
}

// InstanceID implements Store: 8 random hex digits, made on first use.
func (s *BoltStore) InstanceID() (string, error) {
	v, err := s.MetaString("instance-id")
	if err != nil || v != "" {
		return v, err
	}
	v = newID()[:8]
	return v, s.SetMetaString("instance-id", v)
}

// MetaString reads a string value from the meta bucket ("" if absent).
func (s *BoltStore) MetaString(key string) (string, error) {
	var v string
	err := s.db.View(func(tx *bolt.Tx) error {
		v = string(tx.Bucket(bucketMeta).Get([]byte(key)))
		return nil
	})
	return v, err
}

// SetMetaString writes a string value into the meta bucket.
func (s *BoltStore) SetMetaString(key, value string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put([]byte(key), []byte(value))
	})
}

var errNoRecord = errors.New("no such record")

func put[T any](s *BoltStore, bucket []byte, id string, v *T) error {
	buf, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).Put([]byte(id), buf)
	})
}

func get[T any](s *BoltStore, bucket []byte, id string) (*T, error) {
	var v *T
	err := s.db.View(func(tx *bolt.Tx) error {
		buf := tx.Bucket(bucket).Get([]byte(id))
		if buf == nil {
			return errNoRecord
		}
		v = new(T)
		return json.Unmarshal(buf, v)
	})
	return v, err
}

func all[T any](s *BoltStore, bucket []byte) ([]*T, error) {
	var out []*T
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).ForEach(func(_, buf []byte) error {
			v := new(T)
			if err := json.Unmarshal(buf, v); err != nil {
				return err
			}
			out = append(out, v)
			return nil
		})
	})
	return out, err
}

func del(s *BoltStore, bucket []byte, id string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).Delete([]byte(id))
	})
}

// update applies fn to a record atomically (read-modify-write in one transaction).
func update[T any](s *BoltStore, bucket []byte, id string, fn func(*T) error) (*T, error) {
	var v *T
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		buf := b.Get([]byte(id))
		if buf == nil {
			return errNoRecord
		}
		v = new(T)
		if err := json.Unmarshal(buf, v); err != nil {
			return err
		}
		if err := fn(v); err != nil {
			return err
		}
		out, err := json.Marshal(v)
		if err != nil {
			return err
		}
		return b.Put([]byte(id), out)
	})
	return v, err
}

// PutSandbox writes a sandbox record.
func (s *BoltStore) PutSandbox(r *Record) error { return put(s, bucketSandboxes, r.ID, r) }

// Sandbox reads a sandbox record.
func (s *BoltStore) Sandbox(id string) (*Record, error) { return get[Record](s, bucketSandboxes, id) }

// Sandboxes reads every sandbox record.
func (s *BoltStore) Sandboxes() ([]*Record, error) { return all[Record](s, bucketSandboxes) }

// UpdateSandbox modifies a sandbox record atomically.
func (s *BoltStore) UpdateSandbox(id string, fn func(*Record) error) (*Record, error) {
	return update(s, bucketSandboxes, id, fn)
}

// DeleteSandbox removes a sandbox record.
func (s *BoltStore) DeleteSandbox(id string) error { return del(s, bucketSandboxes, id) }

// PutSnapshot writes a snapshot record.
func (s *BoltStore) PutSnapshot(r *SnapshotRecord) error { return put(s, bucketSnapshots, r.ID, r) }

// Snapshot reads a snapshot record.
func (s *BoltStore) Snapshot(id string) (*SnapshotRecord, error) {
	return get[SnapshotRecord](s, bucketSnapshots, id)
}

// Snapshots reads every snapshot record.
func (s *BoltStore) Snapshots() ([]*SnapshotRecord, error) {
	return all[SnapshotRecord](s, bucketSnapshots)
}

// UpdateSnapshot modifies a snapshot record atomically.
func (s *BoltStore) UpdateSnapshot(id string, fn func(*SnapshotRecord) error) (*SnapshotRecord, error) {
	return update(s, bucketSnapshots, id, fn)
}

// DeleteSnapshot removes a snapshot record.
func (s *BoltStore) DeleteSnapshot(id string) error { return del(s, bucketSnapshots, id) }

// Snapshot states.
const (
	snapshotCreating = "Creating"
	snapshotReady    = "Ready"
	snapshotFailed   = "Failed"
)

// newID returns a random UUID4 string.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// ForkRecord is a fork task as the store keeps it. The ids of its snapshot
// and targets are chosen before anything is made, so that a task resumed
// after a restart finds what it made instead of making it twice.
type ForkRecord struct {
	ID             string    `json:"id"`
	SourceID       string    `json:"sourceId"`
	State          string    `json:"state"`
	Reason         string    `json:"reason,omitempty"`
	Message        string    `json:"message,omitempty"`
	SnapshotID     string    `json:"snapshotId"`
	TargetIDs      []string  `json:"targetIds"`
	Running        []string  `json:"running,omitempty"` // targets made, in TargetIDs' order
	CreatedAt      time.Time `json:"createdAt"`
	UpdatedAt      time.Time `json:"updatedAt"`
	CleanupPending bool      `json:"cleanupPending,omitempty"`
	IdempotencyKey string    `json:"idempotencyKey,omitempty"`
	Digest         string    `json:"digest"`
	// Target is every target's create request: the request's overrides
	// over what the source passes on. It is kept only until the task
	// settles (it may hold the request's env values).
	Target *CreateRequest `json:"target,omitempty"`
}
