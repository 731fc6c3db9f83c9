package kubernetes

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/sandboxd/sandboxd/runtime"
)

// What sandboxd knows about a sandbox (lifecycle's record: expiry,
// renewals, metadata, activity; opaque here) is kept in an annotation of
// its pod, so that every replica serving the namespace reads the same and
// the record goes with the pod.
const (
	annotationRecord = "opensandbox.io/sandboxd-record"
	// maxRecordBytes keeps a record well inside the 256 KiB Kubernetes
	// allows for all of an object's annotations.
	maxRecordBytes = 128 << 10
	// secretKey is the data key of the Secrets that hold Secret's values.
	secretKey = "secret"
)

// recordOf returns the record stored on pod (nil if none).
func recordOf(pod *corev1.Pod) []byte {
	if v, ok := pod.Annotations[annotationRecord]; ok {
		return []byte(v)
	}
	return nil
}

func checkRecord(data []byte) error {
	if len(data) > maxRecordBytes {
		return fmt.Errorf("record of %d bytes is over the %d a pod annotation may hold", len(data), maxRecordBytes)
	}
	return nil
}

// PutRecord implements runtime.Records with a merge patch of the one
// annotation.
func (k *Kubernetes) PutRecord(ctx context.Context, name string, data []byte) error {
	if err := checkRecord(data); err != nil {
		return err
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{annotationRecord: string(data)}}})
	cctx, cancel := k.call(ctx)
	defer cancel()
	_, err := k.cs.CoreV1().Pods(k.opts.Namespace).Patch(cctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return wrap(err, "store record of pod %s", name)
}

// Record implements runtime.Records.
func (k *Kubernetes) Record(ctx context.Context, name string) ([]byte, error) {
	cctx, cancel := k.call(ctx)
	defer cancel()
	pod, err := k.pods().Get(cctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, wrap(err, "read record of pod %s", name)
	}
	rec := recordOf(pod)
	if rec == nil {
		return nil, fmt.Errorf("pod %s carries no record: %w", name, runtime.ErrNotFound)
	}
	return rec, nil
}

// Records implements runtime.Records.
func (k *Kubernetes) Records(ctx context.Context, labels map[string]string) (map[string][]byte, error) {
	pods, err := k.listPods(ctx, labels)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for i := range pods {
		if rec := recordOf(&pods[i]); rec != nil {
			out[pods[i].Name] = rec
		}
	}
	return out, nil
}

// errFn marks fn's own error, which UpdateRecord returns as it is.
type errFn struct{ err error }

func (e errFn) Error() string { return e.err.Error() }

// UpdateRecord implements runtime.Records: an update of the pod at the
// resourceVersion read, retried on a conflict with another replica.
func (k *Kubernetes) UpdateRecord(ctx context.Context, name string, fn func(current []byte) ([]byte, error)) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cctx, cancel := k.call(ctx)
		defer cancel()
		pod, err := k.pods().Get(cctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur := recordOf(pod)
		if cur == nil {
			return fmt.Errorf("pod %s carries no record: %w", name, runtime.ErrNotFound)
		}
		next, err := fn(cur)
		if err != nil {
			return errFn{err}
		}
		if err := checkRecord(next); err != nil {
			return err
		}
		pod = pod.DeepCopy()
		pod.Annotations[annotationRecord] = string(next)
		_, err = k.cs.CoreV1().Pods(k.opts.Namespace).Update(cctx, pod, metav1.UpdateOptions{})
		return err
	})
	var fe errFn
	if errors.As(err, &fe) {
		return fe.err
	}
	if errors.Is(err, runtime.ErrNotFound) {
		return err
	}
	return wrap(err, "update record of pod %s", name)
}

// Secret implements runtime.Records with a Kubernetes Secret per name
// (sandboxd-NAME): the first replica to ask creates it, the others read
// it.
func (k *Kubernetes) Secret(ctx context.Context, name string) ([]byte, error) {
	secrets := k.cs.CoreV1().Secrets(k.opts.Namespace)
	obj := "sandboxd-" + name
	cctx, cancel := k.call(ctx)
	defer cancel()
	s, err := secrets.Get(cctx, obj, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		value := make([]byte, 32)
		rand.Read(value)
		s, err = secrets.Create(cctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: obj, Labels: map[string]string{labelManagedBy: managedBy}},
			Data:       map[string][]byte{secretKey: value},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			s, err = secrets.Get(cctx, obj, metav1.GetOptions{}) // another replica was first
		}
	}
	if err != nil {
		return nil, wrap(err, "secret %s", obj)
	}
	if v := s.Data[secretKey]; len(v) >= 32 {
		return v, nil
	}
	return nil, fmt.Errorf("secret %s: key %q holds fewer than 32 bytes", obj, secretKey)
}

// listPods returns sandboxd's pods carrying labels (see selector).
func (k *Kubernetes) listPods(ctx context.Context, want map[string]string) ([]corev1.Pod, error) {
	cctx, cancel := k.call(ctx)
	defer cancel()
	list, err := k.pods().List(cctx, metav1.ListOptions{LabelSelector: selector(want)})
	if err != nil {
		return nil, wrap(err, "list pods")
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if matches(specLabels(&p), want) {
			out = append(out, p)
		}
	}
	return out, nil
}
