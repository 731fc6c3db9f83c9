//go:build linux

package agent

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/user"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/runtime/transfer"
)

// fileInfo is execd's FileInfo. Every field is required by the SDKs.
type fileInfo struct {
	Path       string    `json:"path"`
	Type       string    `json:"type"`
	Size       int64     `json:"size"`
	ModifiedAt time.Time `json:"modified_at"`
	CreatedAt  time.Time `json:"created_at"`
	Owner      string    `json:"owner"`
	Group      string    `json:"group"`
	Mode       int       `json:"mode"` // transfer.Permission bits as octal digits: 0644 → 644
}

// idNames resolves and caches owner and group names for one request.
type idNames struct {
	users, groups map[uint32]string
}

func (n *idNames) user(uid uint32) string {
	return cachedName(&n.users, uid, func(id string) (string, error) {
		u, err := user.LookupId(id)
		if err != nil {
			return "", err
		}
		return u.Username, nil
	})
}

func (n *idNames) group(gid uint32) string {
	return cachedName(&n.groups, gid, func(id string) (string, error) {
		g, err := user.LookupGroupId(id)
		if err != nil {
			return "", err
		}
		return g.Name, nil
	})
}

// cachedName resolves a numeric id to a name once, falling back to the
// number when the sandbox's passwd or group file does not know it.
func cachedName(cache *map[uint32]string, id uint32, lookup func(string) (string, error)) string {
	if name, ok := (*cache)[id]; ok {
		return name
	}
	name := strconv.FormatUint(uint64(id), 10)
	if found, err := lookup(name); err == nil {
		name = found
	}
	if *cache == nil {
		*cache = make(map[uint32]string)
	}
	(*cache)[id] = name
	return name
}

func (n *idNames) info(p string, fi fs.FileInfo) fileInfo {
	out := fileInfo{
		Path:       p,
		Type:       fileType(fi.Mode()),
		Size:       fi.Size(),
		ModifiedAt: fi.ModTime(),
		CreatedAt:  fi.ModTime(),
		Mode:       octalDigits(fi.Mode().Perm()),
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		out.Owner, out.Group = n.user(st.Uid), n.group(st.Gid)
		out.CreatedAt = time.Unix(st.Ctim.Sec, st.Ctim.Nsec) // execd reports ctime
	}
	return out
}

func fileType(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m.IsDir():
		return "directory"
	case m.IsRegular():
		return "file"
	default:
		return "other"
	}
}

// octalDigits writes transfer.Permission bits the way execd does: 0644 → 644.
func octalDigits(m fs.FileMode) int {
	n, _ := strconv.Atoi(strconv.FormatUint(uint64(m), 8))
	return n
}

// fileMode is execd's mode (755) as Go's: setuid, setgid and sticky as
// fs.ModeSetuid, fs.ModeSetgid and fs.ModeSticky, which os.Chmod reads.
func fileMode(n int) (fs.FileMode, error) {
	m, err := transfer.ParseMode(n)
	if err != nil {
		return 0, err
	}
	mode := m & fs.ModePerm
	for bit, flag := range map[fs.FileMode]fs.FileMode{0o4000: fs.ModeSetuid, 0o2000: fs.ModeSetgid, 0o1000: fs.ModeSticky} {
		if m&bit != 0 {
			mode |= flag
		}
	}
	return mode, nil
}

// absPath expands ~ and $VAR in p and makes it absolute.
func absPath(p string) (string, error) {
	p, err := expandPath(p, os.Environ())
	if err != nil {
		return "", err
	}
	return filepath.Abs(p)
}

// fileError answers with FILE_NOT_FOUND or RUNTIME_ERROR.
func fileError(w http.ResponseWriter, err error) {
	if errors.Is(err, fs.ErrNotExist) {
		writeError(w, http.StatusNotFound, codeFileNotFound, err.Error())
		return
	}
	writeError(w, http.StatusInternalServerError, codeRuntimeError, err.Error())
}

// applyPermission sets mode (unless 0) and owner/group (those given). Names
// that do not resolve are tried as numeric ids, then ignored, as in execd.
func (s *server) applyPermission(p string, perm transfer.Permission) error {
	if perm.Mode != 0 {
		mode, err := fileMode(perm.Mode)
		if err != nil {
			return err
		}
		if err := os.Chmod(p, mode); err != nil {
			return err
		}
	}
	uid, gid := s.owner(p, perm)
	if uid == -1 && gid == -1 {
		return nil
	}
	return os.Chown(p, uid, gid)
}

// owner resolves perm's owner and group for p; -1 is "leave it".
func (s *server) owner(p string, perm transfer.Permission) (uid, gid int) {
	uid, gid = -1, -1
	if perm.Owner != "" {
		if u, err := user.Lookup(perm.Owner); err == nil {
			uid, _ = strconv.Atoi(u.Uid)
		} else if n, err := strconv.Atoi(perm.Owner); err == nil && n >= 0 {
			uid = n
		} else {
			s.log.Warn("unknown owner", "owner", perm.Owner, "path", p)
		}
	}
	if perm.Group != "" {
		if g, err := user.LookupGroup(perm.Group); err == nil {
			gid, _ = strconv.Atoi(g.Gid)
		} else if n, err := strconv.Atoi(perm.Group); err == nil && n >= 0 {
			gid = n
		} else {
			s.log.Warn("unknown group", "group", perm.Group, "path", p)
		}
	}
	return uid, gid
}

// filesInfo serves GET /files/info?path=a&path=b: Lstat of each path. Any
// missing path fails the whole request with 404, as the SDKs expect.
func (s *server) filesInfo(w http.ResponseWriter, r *http.Request) {
	var names idNames
	out := make(map[string]fileInfo)
	for _, p := range r.URL.Query()["path"] {
		abs, err := absPath(p)
		if err != nil {
			writeError(w, http.StatusBadRequest, codeInvalidRequest, err.Error())
			return
		}
		fi, err := os.Lstat(abs)
		if err != nil {
			fileError(w, err)
			return
		}
		out[p] = names.info(abs, fi)
	}
	writeJSON(w, http.StatusOK, out)
}

// removeFiles serves DELETE /files?path=…: missing files are fine,
// directories are refused.
func (s *server) removeFiles(w http.ResponseWriter, r *http.Request) {
	for _, p := range r.URL.Query()["path"] {
		abs, err := absPath(p)
		if err != nil {
			writeError(w, http.StatusBadRequest, codeInvalidRequest, err.Error())
			return
		}
		fi, err := os.Lstat(abs)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err == nil && fi.IsDir() {
			err = fmt.Errorf("path is a directory: %s", p)
		}
		if err == nil {
			err = os.Remove(abs)
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			writeError(w, http.StatusInternalServerError, codeRuntimeError, fmt.Sprintf("error removing file %s: %v", p, err))
			return
		}
	}
}

// moveFiles serves POST /files/mv [{src, dest}].
func (s *server) moveFiles(w http.ResponseWriter, r *http.Request) {
	var req []struct {
		Src  string `json:"src"`
		Dest string `json:"dest"`
	}
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, http.StatusBadRequest, codeInvalidRequest, err.Error())
		return
	}
	for _, m := range req {
		src, err := absPath(m.Src)
		if err != nil {
			writeError(w, http.StatusBadRequest, codeInvalidRequest, err.Error())
			return
		}
		dest, err := absPath(m.Dest)
		if err != nil {
			writeError(w, http.StatusBadRequest, codeInvalidRequest, err.Error())
			return
		}
		if err := move(src, dest); err != nil {
			fileError(w, err)
			return
		}
	}
}

// move renames src to dest, creating dest's parent and refusing to replace
// an existing dest. A regular file is copied across filesystems.
func move(src, dest string) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return fmt.Errorf("source path not found: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return fmt.Errorf("create destination directory: %w", err)
	}
	if _, err := os.Lstat(dest); err == nil {
		return fmt.Errorf("destination path already exists: %s", dest)
	}
	err = os.Rename(src, dest)
	if !errors.Is(err, syscall.EXDEV) || !fi.Mode().IsRegular() {
		return err
	}
	if err := copyFile(src, dest, fi.Mode().Perm()); err != nil {
		return err
	}
	return os.Remove(src)
}

func copyFile(src, dest string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dest, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		os.Remove(dest)
		return err
	}
	return out.Close()
}

// setPermissions serves POST /files/permissions {"<path>": transfer.Permission}.
func (s *server) setPermissions(w http.ResponseWriter, r *http.Request) {
	var req map[string]transfer.Permission
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, http.StatusBadRequest, codeInvalidRequest, err.Error())
		return
	}
	for p, perm := range req {
		abs, err := absPath(p)
		if err == nil {
			err = s.applyPermission(abs, perm)
		}
		if err != nil {
			fileError(w, fmt.Errorf("error changing permissions for %s: %w", p, err))
			return
		}
	}
}

// searchFiles serves GET /files/search?path=&pattern=: the files (not
// directories) under path whose base name matches the glob pattern.
func (s *server) searchFiles(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	root := q.Get("path")
	if root == "" {
		writeError(w, http.StatusBadRequest, codeMissingQuery, "missing query parameter 'path'")
		return
	}
	pattern := q.Get("pattern")
	if pattern == "" {
		pattern = "**"
	}
	patterns, err := globAlternatives(pattern)
	if err != nil {
		writeError(w, http.StatusBadRequest, codeInvalidRequest, err.Error())
		return
	}
	root, err = absPath(root)
	if err != nil {
		writeError(w, http.StatusBadRequest, codeInvalidRequest, err.Error())
		return
	}
	if _, err := os.Stat(root); err != nil {
		fileError(w, err)
		return
	}
	var names idNames
	out := []fileInfo{}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == root {
				return err
			}
			return nil // unreadable or vanished: skip it
		}
		if d.IsDir() || !matchAny(patterns, d.Name()) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		out = append(out, names.info(p, fi))
		return nil
	})
	if err != nil {
		fileError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// maxGlobAlternatives bounds brace expansion.
const maxGlobAlternatives = 1024

// globAlternatives expands {a,b} alternatives and validates the result.
// Patterns are matched against base names, which have no separator: a
// leading "**/" matches no directory at all, and ** is the same as *.
func globAlternatives(pattern string) ([]string, error) {
	alts, err := expandBraces(pattern)
	if err != nil {
		return nil, err
	}
	for i, a := range alts {
		for strings.HasPrefix(a, "**/") {
			a = a[len("**/"):]
		}
		for strings.Contains(a, "**") {
			a = strings.ReplaceAll(a, "**", "*")
		}
		if _, err := path.Match(a, ""); err != nil {
			return nil, fmt.Errorf("invalid pattern %q: %w", pattern, err)
		}
		alts[i] = a
	}
	return alts, nil
}

func matchAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

// expandBraces turns "a{b,c{d,e}}" into [ab acd ace].
func expandBraces(p string) ([]string, error) {
	open, depth := -1, 0
	var commas []int
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '\\':
			i++
		case '{':
			if depth == 0 {
				open = i
			}
			depth++
		case ',':
			if depth == 1 {
				commas = append(commas, i)
			}
		case '}':
			if depth == 0 {
				return nil, fmt.Errorf("invalid pattern %q: unbalanced }", p)
			}
			depth--
			if depth > 0 {
				continue
			}
			prefix, suffix := p[:open], p[i+1:]
			cuts := append(append([]int{open}, commas...), i)
			var out []string
			for k := 0; k+1 < len(cuts); k++ {
				sub, err := expandBraces(prefix + p[cuts[k]+1:cuts[k+1]] + suffix)
				if err != nil {
					return nil, err
				}
				out = append(out, sub...)
				if len(out) > maxGlobAlternatives {
					return nil, fmt.Errorf("invalid pattern %q: too many alternatives", p)
				}
			}
			return out, nil
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("invalid pattern %q: unbalanced {", p)
	}
	return []string{p}, nil
}

// replaceInFiles serves POST /files/replace[?verbose=true]
// {"<path>": {old, new}}; verbose answers {"<path>": {"replacedCount": n}}.
func (s *server) replaceInFiles(w http.ResponseWriter, r *http.Request) {
	var req map[string]struct {
		Old string `json:"old"`
		New string `json:"new"`
	}
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, http.StatusBadRequest, codeInvalidRequest, err.Error())
		return
	}
	type result struct {
		ReplacedCount int `json:"replacedCount"`
	}
	results := make(map[string]result, len(req))
	for p, item := range req {
		abs, err := absPath(p)
		if err != nil {
			writeError(w, http.StatusBadRequest, codeInvalidRequest, err.Error())
			return
		}
		content, err := os.ReadFile(abs)
		if err != nil {
			fileError(w, err)
			return
		}
		if item.Old == "" { // checked after the file, as execd: a missing file is 404 first
			writeError(w, http.StatusBadRequest, codeInvalidRequest, "old content must not be empty")
			return
		}
		n := strings.Count(string(content), item.Old)
		if n > 0 {
			// Written in place: the file keeps its inode, owner and mode.
			updated := strings.ReplaceAll(string(content), item.Old, item.New)
			if err := os.WriteFile(abs, []byte(updated), 0o644); err != nil {
				fileError(w, err)
				return
			}
		}
		results[p] = result{n}
	}
	if r.URL.Query().Get("verbose") == "true" {
		writeJSON(w, http.StatusOK, results)
	}
}

// makeDirs serves POST /directories {"<path>": transfer.Permission}: mkdir -p, then
// the transfer.Permission.
func (s *server) makeDirs(w http.ResponseWriter, r *http.Request) {
	var req map[string]transfer.Permission
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, http.StatusBadRequest, codeInvalidRequest, err.Error())
		return
	}
	for p, perm := range req {
		abs, err := absPath(p)
		if err != nil {
			writeError(w, http.StatusBadRequest, codeInvalidRequest, err.Error())
			return
		}
		if err := os.MkdirAll(abs, 0o755); err != nil {
			fileError(w, err)
			return
		}
		if err := s.applyPermission(abs, perm); err != nil {
			fileError(w, err)
			return
		}
	}
}

// removeDirs serves DELETE /directories?path=…: rm -rf.
func (s *server) removeDirs(w http.ResponseWriter, r *http.Request) {
	for _, p := range r.URL.Query()["path"] {
		abs, err := absPath(p)
		if err != nil {
			writeError(w, http.StatusBadRequest, codeInvalidRequest, err.Error())
			return
		}
		if err := os.RemoveAll(abs); err != nil {
			writeError(w, http.StatusInternalServerError, codeRuntimeError, fmt.Sprintf("error removing directory %s: %v", p, err))
			return
		}
	}
}

// listDir serves GET /directories/list?path=&depth=1: entries depth levels
// deep, each directory's entries in lexical order right after it. Symlinks
// are listed, never followed.
func (s *server) listDir(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	root := q.Get("path")
	if root == "" {
		writeError(w, http.StatusBadRequest, codeMissingQuery, "missing query parameter 'path'")
		return
	}
	depth := 1
	if v := q.Get("depth"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, codeInvalidRequest, "invalid query parameter 'depth': "+v)
			return
		}
		depth = n
	}
	root, err := absPath(root)
	if err != nil {
		writeError(w, http.StatusBadRequest, codeInvalidRequest, err.Error())
		return
	}
	fi, err := os.Lstat(root)
	if err != nil {
		fileError(w, err)
		return
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		writeError(w, http.StatusBadRequest, codeInvalidRequest, "path is a symbolic link, refusing to traverse: "+root)
		return
	}
	if !fi.IsDir() {
		writeError(w, http.StatusBadRequest, codeInvalidRequest, "path is not a directory: "+root)
		return
	}
	var names idNames
	out := []fileInfo{}
	var walk func(dir string, level int) error
	walk = func(dir string, level int) error {
		entries, err := os.ReadDir(dir) // sorted by name
		if level > 0 && errors.Is(err, fs.ErrNotExist) {
			return nil // vanished meanwhile, like an entry
		}
		if err != nil {
			return err
		}
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			fi, err := e.Info()
			if errors.Is(err, fs.ErrNotExist) {
				continue // vanished meanwhile
			}
			if err != nil {
				return err
			}
			out = append(out, names.info(p, fi))
			if e.IsDir() && level+1 < depth {
				if err := walk(p, level+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if depth > 0 {
		// A subtree that cannot be read fails the request, as in execd:
		// a partial listing would look complete.
		if err := walk(root, 0); err != nil {
			writeError(w, http.StatusInternalServerError, codeRuntimeError, fmt.Sprintf("error listing directory %s. %v", root, err))
			return
		}
	}
	writeJSON(w, http.StatusOK, out)
}
