package discovery

import corev1 "k8s.io/api/core/v1"

// Eligible reports whether a pod should be registered at all: Running,
// Ready, with an IP, and not being deleted (a terminating pod is
// deregistered at once, although it may stay Ready for its grace period).
func Eligible(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
