package discovery

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pdrouter/pdrouter/discovery/workerspec"
)

// workerPod is a Running, Ready pod with the selector's label and a valid
// set of annotations, which a test edits.
func workerPod(ns, name, ip string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"pdrouter.io/worker": "true"},
			Annotations: map[string]string{
				workerspec.AnnotationPool: "decode", workerspec.AnnotationModel: "llama", workerspec.AnnotationBlockSize: "16",
				workerspec.AnnotationHTTPPort: "8000", workerspec.AnnotationKVEventsPort: "5557", workerspec.AnnotationTotalKVBlocks: "4096",
			}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

func TestEligible(t *testing.T) {
	now := metav1.Now()
	for _, tc := range []struct {
		name string
		edit func(*corev1.Pod)
		want bool
	}{
		{"running and ready", func(*corev1.Pod) {}, true},
		{"pending", func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }, false},
		{"not ready", func(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }, false},
		{"no ready condition", func(p *corev1.Pod) { p.Status.Conditions = nil }, false},
		{"no IP", func(p *corev1.Pod) { p.Status.PodIP = "" }, false},
		{"terminating", func(p *corev1.Pod) { p.DeletionTimestamp = &now }, false},
	} {
		p := workerPod("ns", "p", "10.0.0.1")
		tc.edit(p)
		if got := Eligible(p); got != tc.want {
			t.Errorf("%s: Eligible = %v, want %v", tc.name, got, tc.want)
		}
	}
}
