package lifecycle

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sandboxd/sandboxd/runtime"
)

// LabelVolumeManaged marks named volumes that sandboxd created.
const LabelVolumeManaged = "opensandbox.io/volume-managed-by"

// checkHostPath validates a bind-mount source: its shape here, the rest
// (symlinks, the allow-list, the engine's own paths) by the runtime,
// which knows the filesystem of the engine's host. It returns the mount
// to make, with the resolved path and the checked prefix it lies in.
func (d *deps) checkHostPath(ctx context.Context, name, p string) (runtime.Mount, error) {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p || strings.Contains(p, "\x00") {
		return runtime.Mount{}, errf(KindInvalid, CodeVolInvalidHostPath, "volume %q: host path %q must be absolute and normalised (no '..', '//' or trailing '/')", name, p)
	}
	hp := d.rt.Features().HostPaths
	if hp == nil {
		return runtime.Mount{}, errf(KindInvalid, CodeVolUnsupported, "volume %q: host paths are not supported when runtime.type='%s'", name, d.rt.Name())
	}
	mnt, err := hp.CheckHostPath(ctx, p, []string{d.cfg.Store.Dir})
	var he *runtime.HostPathError
	switch {
	case errors.As(err, &he) && he.NotAllowed:
		return runtime.Mount{}, errf(KindInvalid, CodeVolHostNotAllowed, "volume %q: %s", name, he.Reason)
	case errors.As(err, &he):
		return runtime.Mount{}, errf(KindInvalid, CodeVolInvalidHostPath, "volume %q: %s", name, he.Reason)
	case err != nil:
		return runtime.Mount{}, d.engineError(err, "ask the engine where it keeps its data")
	}
	return mnt, nil
}

// mountRefusal is the client error for a mount the runtime refused to
// make as checked, or nil if err is not one.
func mountRefusal(err error) *Error {
	var me *runtime.MountError
	if !errors.As(err, &me) {
		return nil
	}
	code := CodeVolHostNotAllowed
	if me.SubPath {
		code = CodeVolInvalidSubPath
	}
	return &Error{Kind: KindInvalid, Code: code, Message: "volume at " + me.Target + " refused: " + me.Reason, Err: err}
}

// preparedVolumes are the mounts of a create request.
type preparedVolumes struct {
	mounts  []runtime.Mount
	managed []string // named volumes to delete with the sandbox
	created []string // named volumes this request created: removed if the create fails
}

// prepareVolumes validates the requested volumes, creating named volumes as
// needed. On error it removes the volumes it created.
func (d *deps) prepareVolumes(ctx context.Context, vols []Volume) (*preparedVolumes, error) {
	pv := &preparedVolumes{}
	if err := d.addVolumes(ctx, vols, pv); err != nil {
		d.removeVolumes(context.WithoutCancel(ctx), pv.created)
		return nil, err
	}
	return pv, nil
}

// removeVolumes removes named volumes, logging failures. Only a runtime
// with volumes can have made them.
func (d *deps) removeVolumes(ctx context.Context, names []string) {
	vols := d.rt.Features().Volumes
	if vols == nil {
		return
	}
	for _, v := range names {
		if err := vols.RemoveVolume(ctx, v); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			d.log.Warn("remove named volume", "volume", v, "err", err)
		}
	}
}

func (d *deps) addVolumes(ctx context.Context, vols []Volume, pv *preparedVolumes) error {
	seen := map[string]bool{}
	for _, v := range vols {
		if err := validateVolumeShape(v, seen); err != nil {
			return err
		}
	}
	for _, v := range vols {
		switch {
		case v.Host != nil:
			mnt, err := d.checkHostPath(ctx, v.Name, v.Host.Path)
			if err != nil {
				return err
			}
			if v.SubPath != "" {
				if mnt, err = d.checkHostPath(ctx, v.Name, filepath.Join(mnt.Source, v.SubPath)); err != nil {
					return err
				}
			}
			mnt.Target, mnt.ReadOnly = v.MountPath, v.ReadOnly
			pv.mounts = append(pv.mounts, mnt)
		case v.PVC != nil:
			name := v.PVC.ClaimName
			create := v.PVC.CreateIfNotExists == nil || *v.PVC.CreateIfNotExists
			allowedExisting := slices.Contains(d.cfg.Storage.AllowedVolumes, name)
			vols := d.rt.Features().Volumes
			if vols == nil {
				return errf(KindInvalid, CodeVolUnsupported, "volume %q: named volumes are not supported when runtime.type='%s'", v.Name, d.rt.Name())
			}
			created, labels, err := vols.EnsureVolume(ctx, name, create, map[string]string{LabelVolumeManaged: "server", LabelInstance: d.instance})
			if errors.Is(err, runtime.ErrNotFound) {
				return errf(KindInvalid, CodeVolPVCNotFound, "volume %q: named volume %q does not exist", v.Name, name)
			}
			if err != nil {
				return d.engineError(err, "prepare volume")
			}
			if created {
				pv.created = append(pv.created, name)
			}
			// Another instance's managed volume is not ours to mount or to
			// delete: the instance label decides, not the managed label.
			owned := created || (labels[LabelVolumeManaged] == "server" && labels[LabelInstance] == d.instance)
			if !owned && !allowedExisting {
				return errf(KindInvalid, CodeVolPVCNotAllowed, "volume %q: existing named volume %q was not created by this sandboxd instance; list it in [storage] allowed_volumes to allow it", v.Name, name)
			}
			if v.PVC.DeleteOnSandboxTermination && owned {
				pv.managed = append(pv.managed, name)
			}
			pv.mounts = append(pv.mounts, runtime.Mount{Kind: runtime.MountVolume, Source: name, Target: v.MountPath, ReadOnly: v.ReadOnly, SubPath: v.SubPath})
		}
	}
	return nil
}
