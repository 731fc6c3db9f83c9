package lifecycle

import "github.com/sandboxd/sandboxd/runtime"

// createPlan is a validated create request.
type createPlan struct {
	rec      Record
	spec     runtime.Spec
	auth     *runtime.RegistryAuth
	volumes  *preparedVolumes
	fromPool string
}
