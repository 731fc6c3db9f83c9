package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
)

// What sandboxd knows about a sandbox is kept on its pod, so that every
// replica serving the namespace reads the same: the record (expiry,
// renewals, metadata: lifecycle's JSON, opaque here) in one annotation,
// and the last activity in another, which the reaper writes alone and
// often.
const (
	annotationRecord   = "opensandbox.io/sandboxd-record"
	annotationActivity = "opensandbox.io/sandboxd-last-activity"
	// maxRecordBytes keeps a record well inside the 256 KiB Kubernetes
	// allows for all of an object's annotations.
	maxRecordBytes = 128 << 10
)

// decodeRecord returns the record stored in annotations (nil if none) and
// the last activity (zero if none or unreadable).
func decodeRecord(annotations map[string]string) (json.RawMessage, time.Time) {
	var rec json.RawMessage
	if v, ok := annotations[annotationRecord]; ok && json.Valid([]byte(v)) {
		rec = json.RawMessage(v)
	}
	at, _ := time.Parse(time.RFC3339Nano, annotations[annotationActivity])
	return rec, at
}

// encodeRecord checks rec and returns it as an annotation value.
func encodeRecord(rec []byte) (string, error) {
	if !json.Valid(rec) {
		return "", fmt.Errorf("record is not JSON")
	}
	if len(rec) > maxRecordBytes {
		return "", fmt.Errorf("record of %d bytes is over the %d a pod annotation may hold", len(rec), maxRecordBytes)
	}
	return string(rec), nil
}

// mergePatch is a JSON merge patch setting annotations (a nil value
// removes its key).
func mergePatch(annotations map[string]*string) []byte {
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	return b
}

// Record returns the record stored on pod id (nil if it has none) and its
// last activity.
func (k *Kubernetes) Record(ctx context.Context, id string) (json.RawMessage, time.Time, error) {
	cctx, cancel := k.call(ctx)
	defer cancel()
	pod, err := k.pods().Get(cctx, id, metav1.GetOptions{})
	if err != nil {
		return nil, time.Time{}, wrap(err, "read record of pod %s", id)
	}
	rec, at := decodeRecord(pod.Annotations)
	return rec, at, nil
}

// Records returns the records of the pods carrying labels, by pod name.
func (k *Kubernetes) Records(ctx context.Context, labels map[string]string) (map[string]json.RawMessage, error) {
	pods, err := k.listPods(ctx, labels)
	if err != nil {
		return nil, err
	}
	out := map[string]json.RawMessage{}
	for _, p := range pods {
		if rec, _ := decodeRecord(p.Annotations); rec != nil {
			out[p.Name] = rec
		}
	}
	return out, nil
}

// UpdateRecord replaces the record of pod id with what update makes of
// the current one (nil if none). Replicas updating at once do not lose
// each other's change: a write on a changed pod is retried on the new one.
func (k *Kubernetes) UpdateRecord(ctx context.Context, id string, update func(json.RawMessage) ([]byte, error)) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cctx, cancel := k.call(ctx)
		defer cancel()
		pod, err := k.pods().Get(cctx, id, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur, _ := decodeRecord(pod.Annotations)
		next, err := update(cur)
		if err != nil {
			return err
		}
		v, err := encodeRecord(next)
		if err != nil {
			return err
		}
		pod = pod.DeepCopy()
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[annotationRecord] = v
		_, err = k.cs.CoreV1().Pods(k.opts.Namespace).Update(cctx, pod, metav1.UpdateOptions{})
		return err
	})
	return wrap(err, "update record of pod %s", id)
}

// SetActivity stores the last activity of pod id (a merge patch: it never
// conflicts with a record update).
func (k *Kubernetes) SetActivity(ctx context.Context, id string, at time.Time) error {
	v := at.UTC().Format(time.RFC3339Nano)
	cctx, cancel := k.call(ctx)
	defer cancel()
	_, err := k.cs.CoreV1().Pods(k.opts.Namespace).Patch(cctx, id, types.MergePatchType,
		mergePatch(map[string]*string{annotationActivity: &v}), metav1.PatchOptions{})
	return wrap(err, "store activity of pod %s", id)
}

// listPods returns sandboxd's pods carrying labels (see List).
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
