// Package docs holds the user documentation (Markdown pages beside this
// file) and the checks that keep it true: every relative link of the
// project's pages resolves, anchors included, and the configuration page
// names every key the config struct reads.
package docs

import (
	"bufio"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/config"
)

// repoRoot is the module's root, one level above this package.
const repoRoot = ".."

// pages lists the Markdown files of the project (node_modules and testdata
// left out: they are not ours).
func pages(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(repoRoot, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "node_modules", "testdata", ".git":
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".md") {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var (
	linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// fenceRE opens or closes a fenced code block, where links are not links.
	fenceRE = regexp.MustCompile("^\\s*```")
)

// links returns the targets of a page's Markdown links outside code blocks
// and inline code.
func links(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	inFence := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if fenceRE.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range linkRE.FindAllStringSubmatch(stripCode(line), -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// stripCode removes inline code spans, whose brackets are not links.
func stripCode(line string) string {
	var b strings.Builder
	in := false
	for _, r := range line {
		if r == '`' {
			in = !in
			continue
		}
		if !in {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the GitHub anchors of a page's headings.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	inFence := false
	for _, line := range strings.Split(string(data), "\n") {
		if fenceRE.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		out[slug(strings.TrimLeft(line, "# "))] = true
	}
	return out
}

// slug is GitHub's heading anchor: lower case, punctuation dropped, spaces
// to hyphens.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestRelativeLinksResolve(t *testing.T) {
	checked := 0
	for _, page := range pages(t) {
		for _, target := range links(t, page) {
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			dest := page
			if file != "" {
				dest = filepath.Join(filepath.Dir(page), file)
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %q: %v", page, target, err)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(dest, ".md") && !anchors(t, dest)[anchor] {
				t.Errorf("%s: link %q: no heading with anchor %q in %s", page, target, anchor, dest)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found: the page walk is broken")
	}
}

// configKeys returns every key the config file may set, as "[section] key"
// ("[[pool]] key" for the array of tables), read from the struct's toml tags.
func configKeys() []string {
	var keys []string
	ct := reflect.TypeOf(config.Config{})
	for i := 0; i < ct.NumField(); i++ {
		sec := ct.Field(i)
		name := tomlName(sec)
		if name == "" {
			continue
		}
		st, table := sec.Type, "["+name+"]"
		if st.Kind() == reflect.Slice {
			st, table = st.Elem(), "[["+name+"]]"
		}
		if st.Kind() != reflect.Struct {
			continue
		}
		for j := 0; j < st.NumField(); j++ {
			if k := tomlName(st.Field(j)); k != "" {
				keys = append(keys, table+" "+k)
			}
		}
	}
	sort.Strings(keys)
	return keys
}

func tomlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
	if name == "-" {
		return ""
	}
	return name
}

// documentedKeys returns the keys named in the first column of the
// configuration page's tables: "`[section] a`, `b`" names [section] a and
// [section] b; a "[[pool]]" row lists its keys in backquotes in its text.
func documentedKeys(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile("configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	keyRE := regexp.MustCompile("`([^`]+)`")
	out := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		cols := strings.Split(line, "|")
		if len(cols) < 3 {
			continue
		}
		first := cols[1]
		section := ""
		for _, m := range keyRE.FindAllStringSubmatch(first, -1) {
			v := m[1]
			if strings.HasPrefix(v, "[") {
				end := strings.LastIndex(v, "]")
				section, v = v[:end+1], strings.TrimSpace(v[end+1:])
			}
			if section != "" && v != "" {
				out[section+" "+v] = true
			}
		}
		if strings.TrimSpace(first) == "`[[pool]]`" {
			for _, m := range keyRE.FindAllStringSubmatch(strings.Join(cols[2:], "|"), -1) {
				out["[[pool]] "+m[1]] = true
			}
		}
	}
	return out
}

func TestConfigurationPageNamesEveryKey(t *testing.T) {
	doc := documentedKeys(t)
	keys := configKeys()
	if len(keys) < 20 {
		t.Fatalf("found only %d config keys: the struct walk is broken", len(keys))
	}
	for _, k := range keys {
		if !doc[k] {
			t.Errorf("docs/configuration.md does not name %s", k)
		}
	}
}

// TestNamedTestsExist: every test a page names as proof of a claim
// (`TestX`, `FuzzX` in backquotes) exists, so that a renamed or deleted
// test cannot leave a claim without its proof.
func TestNamedTestsExist(t *testing.T) {
	nameRE := regexp.MustCompile("`((?:Test|Fuzz)[A-Za-z0-9_]+)")
	named := map[string][]string{}
	for _, page := range pages(t) {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range nameRE.FindAllStringSubmatch(string(data), -1) {
			named[m[1]] = append(named[m[1]], page)
		}
	}
	defined := map[string]bool{}
	funcRE := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz)[A-Za-z0-9_]+)\(`)
	err := filepath.WalkDir(repoRoot, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == ".git") {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range funcRE.FindAllStringSubmatch(string(data), -1) {
			defined[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(named) < 50 {
		t.Fatalf("only %d tests named in the docs: the scan is broken", len(named))
	}
	for _, n := range slices.Sorted(maps.Keys(named)) {
		if !defined[n] {
			t.Errorf("%s names %s, which no test file defines", strings.Join(named[n], ", "), n)
		}
	}
}
