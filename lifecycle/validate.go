package lifecycle

import (
	"math"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/runtime"
)

// Reserved label prefix: sandboxd and upstream keep their bookkeeping there.
const reservedPrefix = "opensandbox.io/"

var (
	labelName  = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	dnsSubdom  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	dnsLabel   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	quantityRe = regexp.MustCompile(`^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$`)
)

// validateLabelKey checks a metadata key as a Kubernetes label key.
func validateLabelKey(k string) string {
	name := k
	if prefix, rest, ok := strings.Cut(k, "/"); ok {
		if prefix == "" || len(prefix) > 253 || !dnsSubdom.MatchString(prefix) {
			return "prefix must be a DNS subdomain"
		}
		name = rest
	}
	if name == "" || len(name) > 63 || !labelName.MatchString(name) {
		return "name must be 1-63 characters of [A-Za-z0-9-_.], starting and ending alphanumeric"
	}
	return ""
}

func validateLabelValue(v string) string {
	if v == "" {
		return ""
	}
	if len(v) > 63 || !labelName.MatchString(v) {
		return "value must be at most 63 characters of [A-Za-z0-9-_.], starting and ending alphanumeric"
	}
	return ""
}

// maxMetadataEntries bounds metadata so labels stay small.
const maxMetadataEntries = 64

// validateMetadata checks metadata as labels; reservedCode is the code for
// the reserved prefix (upstream differs between create and PATCH).
func validateMetadata(md map[string]string, reservedCode string) error {
	if len(md) > maxMetadataEntries {
		return errf(KindInvalid, CodeInvalidMetadata, "metadata has %d entries, at most %d allowed", len(md), maxMetadataEntries)
	}
	for k, v := range md {
		if strings.HasPrefix(k, reservedPrefix) {
			return errf(KindInvalid, reservedCode, "metadata key %q uses the reserved prefix %q", k, reservedPrefix)
		}
		if msg := validateLabelKey(k); msg != "" {
			return errf(KindInvalid, CodeInvalidMetadata, "metadata key %q is not a valid label key: %s", k, msg)
		}
		if msg := validateLabelValue(v); msg != "" {
			return errf(KindInvalid, CodeInvalidMetadata, "metadata value %q of key %q is not a valid label value: %s", v, k, msg)
		}
	}
	return nil
}

// ParseMetadataFilter parses the list filter `k1=v1&k2=v2` (strictly).
func ParseMetadataFilter(s string) (map[string]string, error) {
	out := map[string]string{}
	if s == "" {
		return out, nil
	}
	for _, part := range strings.Split(s, "&") {
		k, v, ok := strings.Cut(part, "=")
		if !ok || k == "" {
			return nil, errf(KindInvalid, CodeInvalidMetaFormat, "metadata filter %q: each entry must be key=value", s)
		}
		ku, err1 := url.QueryUnescape(k)
		vu, err2 := url.QueryUnescape(v)
		if err1 != nil || err2 != nil {
			return nil, errf(KindInvalid, CodeInvalidMetaFormat, "metadata filter %q is not a valid query string", s)
		}
		out[ku] = vu
	}
	return out, nil
}

// Resources are parsed resourceLimits and resourceRequests.
type Resources = runtime.Resources

var memUnits = map[string]float64{
	"": 1, "b": 1,
	"k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12,
	"ki": 1 << 10, "mi": 1 << 20, "gi": 1 << 30, "ti": 1 << 40,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
}

// ParseMemory parses a Kubernetes- or Docker-style memory quantity.
func ParseMemory(s string) (int64, bool) {
	m := quantityRe.FindStringSubmatch(s)
	if m == nil {
		return 0, false
	}
	n, err := strconv.ParseFloat(m[1], 64)
	unit, ok := memUnits[strings.ToLower(m[2])]
	if err != nil || !ok {
		return 0, false
	}
	b := n * unit
	if b < 1 || b > math.MaxInt64/2 {
		return 0, false
	}
	return int64(b), true
}

// ParseCPU parses "500m", "1", "0.5" into nano-CPUs.
func ParseCPU(s string) (int64, bool) {
	m := quantityRe.FindStringSubmatch(s)
	if m == nil {
		return 0, false
	}
	n, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, false
	}
	switch m[2] {
	case "":
	case "m":
		n /= 1000
	default:
		return 0, false
	}
	nano := int64(n * 1e9)
	if nano < 1e6 || n > 1024 { // at least 1 millicore
		return 0, false
	}
	return nano, true
}

// ParseResources parses resourceLimits, falling back to the given defaults
// for cpu and memory when a limit is absent or blank (so a request cannot
// lift the server's default limits with ""). Unknown keys
// (ephemeral-storage, ...) are ignored, as Docker has nothing to apply them
// to; a bad value is an error naming it.
func ParseResources(limits map[string]string, defCPU, defMem string) (Resources, error) {
	var r Resources
	cpu := limits["cpu"]
	if strings.TrimSpace(cpu) == "" {
		cpu = defCPU
	}
	if cpu != "" {
		n, ok := ParseCPU(cpu)
		if !ok {
			return r, errf(KindInvalid, CodeInvalidParameter, "resourceLimits.cpu %q is not a CPU quantity (examples: \"500m\", \"1\", \"0.5\")", cpu)
		}
		r.NanoCPUs = n
	}
	mem := limits["memory"]
	if strings.TrimSpace(mem) == "" {
		mem = defMem
	}
	if mem != "" {
		n, ok := ParseMemory(mem)
		if !ok || n < 6<<20 {
			return r, errf(KindInvalid, CodeInvalidParameter, "resourceLimits.memory %q is not a memory quantity of at least 6Mi (examples: \"512Mi\", \"2Gi\", \"1G\")", mem)
		}
		r.MemoryBytes = n
	}
	if gpu, ok := limits["gpu"]; ok {
		switch n, err := strconv.Atoi(strings.TrimSpace(gpu)); {
		case strings.TrimSpace(gpu) == "all":
			r.GPUs = -1
		case err == nil && n >= 0:
			r.GPUs = n
		default:
			return r, errf(KindInvalid, CodeInvalidParameter, "resourceLimits.gpu %q must be a count or \"all\"", gpu)
		}
	}
	return r, nil
}

// Extension keys understood by sandboxd.
const (
	ExtRenewOnAccess = "access.renew.extend.seconds"
	ExtPoolRef       = "poolRef"
	// ExtReadOnlyRootfs ("true" or "false") mounts the image read-only with
	// a tmpfs on /tmp.
	ExtReadOnlyRootfs = "sandboxd.io/read-only-rootfs"
	// ExtUser runs the sandbox (and every command in it) as "uid[:gid]" or
	// "name[:group]" instead of the image's user.
	ExtUser = "sandboxd.io/user"
	// ExtNested ("true" or "false") lets the sandbox's processes create
	// unprivileged user namespaces, so that a tool such as bubblewrap can
	// sandbox them further; only where [sandbox] allow_nested is set.
	ExtNested = "sandboxd.io/nested"
)

// nestedUser is the user of a nested sandbox that names none: never root,
// for whom the sandbox's unmasked /proc would be writable.
const nestedUser = "1000:1000"

// userSpec is a Docker user: a name or uid, optionally with a group or gid.
var userSpec = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,31})?$`)

// parseRenewOnAccess validates access.renew.extend.seconds as upstream does.
func parseRenewOnAccess(ext map[string]string) (int, error) {
	v, ok := ext[ExtRenewOnAccess]
	if !ok {
		return 0, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 300 || n > 86400 {
		return 0, errf(KindInvalid, CodeInvalidParameter, "extensions[%q] must be an integer number of seconds between 300 and 86400, got %q", ExtRenewOnAccess, v)
	}
	return n, nil
}

// validateVolumeShape checks the fields of one volume that need no host
// access (reference §1.5.1).
func validateVolumeShape(v Volume, seen map[string]bool) error {
	if !dnsLabel.MatchString(v.Name) || len(v.Name) > 63 {
		return errf(KindInvalid, CodeVolInvalidName, "volume name %q must be a DNS label (lowercase alphanumerics and '-', at most 63)", v.Name)
	}
	if seen[v.Name] {
		return errf(KindInvalid, CodeVolDuplicateName, "volume name %q is used twice", v.Name)
	}
	seen[v.Name] = true
	if !strings.HasPrefix(v.MountPath, "/") || strings.Contains(v.MountPath, "\x00") || hasDotDot(v.MountPath) {
		return errf(KindInvalid, CodeVolInvalidMountPath, "volume %q: mountPath %q must be an absolute path without '..'", v.Name, v.MountPath)
	}
	if v.SubPath != "" && (strings.HasPrefix(v.SubPath, "/") || hasDotDot(v.SubPath) || strings.Contains(v.SubPath, "\x00")) {
		return errf(KindInvalid, CodeVolInvalidSubPath, "volume %q: subPath %q must be relative without '..'", v.Name, v.SubPath)
	}
	n := 0
	for _, set := range []bool{v.Host != nil, v.PVC != nil, v.OSSFS != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return errf(KindInvalid, CodeVolInvalidBackend, "volume %q must have exactly one backend (host or pvc)", v.Name)
	}
	if v.OSSFS != nil {
		return errf(KindInvalid, CodeVolUnsupported, "volume %q: the ossfs backend is not supported by sandboxd", v.Name)
	}
	if v.PVC != nil && (!dnsSubdom.MatchString(v.PVC.ClaimName) || len(v.PVC.ClaimName) > 253) {
		return errf(KindInvalid, CodeVolInvalidPVCName, "volume %q: claimName %q must be a DNS subdomain name", v.Name, v.PVC.ClaimName)
	}
	return nil
}

func hasDotDot(p string) bool {
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return true
		}
	}
	return false
}
