package config

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// decode fills dst, a pointer to a struct, from the TOML document doc. Only struct fields
// with a toml tag are keys; fields of embedded structs count as the embedding struct's own.
// It returns the keys of doc that match no field, outermost only (a whole unknown table is
// one key), without array indexes and without duplicates.
//
// The TOML library only parses here; decoding into dst is done below rather than by
// toml.Decode, which matches keys case-insensitively, silently skips a non-table value
// given for a map, and reports type errors only as formatted strings. This gives exact
// keys, the ignored keys, and errors such as "line 3: server.port: expected integer, got
// string".
func decode(doc string, dst any) (ignored []string, err error) {
	var tree map[string]any
	md, err := toml.Decode(doc, &tree)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("line %d: %s", pe.Position.Line, pe.Message)
		}
		return nil, err
	}
	d := &decoder{doc: doc, keys: md.Keys()}
	if err := d.table(nil, tree, reflect.ValueOf(dst).Elem()); err != nil {
		return nil, err
	}
	return d.ignored, nil
}

type decoder struct {
	doc     string
	keys    []toml.Key // every key of doc in order, repeated once per [[table]] element
	ignored []string
}

// segment is one step of a key path: a key, and if its value is an array, the element.
type segment struct {
	name  string
	index int // -1 for the key itself
}

type keyPath []segment

// child returns a new path; it never shares p's backing array, so siblings stay intact.
func (p keyPath) child(name string) keyPath {
	return append(p[:len(p):len(p)], segment{name, -1})
}

func (p keyPath) element(i int) keyPath {
	q := slices.Clone(p)
	q[len(q)-1].index = i
	return q
}

// String returns the key as users write it, with indexes: "pool[1].env.HOME".
func (p keyPath) String() string {
	var b strings.Builder
	for i, s := range p {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(s.name)
		if s.index >= 0 {
			fmt.Fprintf(&b, "[%d]", s.index)
		}
	}
	return b.String()
}

// dotted returns the key without indexes, as the TOML library names it: "pool.env.HOME".
func (p keyPath) dotted() string {
	names := make(toml.Key, len(p))
	for i, s := range p {
		names[i] = s.name
	}
	return names.String()
}

func (d *decoder) table(path keyPath, tree map[string]any, v reflect.Value) error {
	fields := make(map[string]reflect.Value)
	tomlFields(v, fields)
	for _, name := range sortedKeys(tree) {
		key := path.child(name)
		f, ok := fields[name]
		if !ok {
			if k := key.dotted(); !slices.Contains(d.ignored, k) {
				d.ignored = append(d.ignored, k)
			}
			continue
		}
		if err := d.value(key, tree[name], f); err != nil {
			return err
		}
	}
	return nil
}

// tomlFields adds the settable fields of struct v to fields, by toml tag.
func tomlFields(v reflect.Value, fields map[string]reflect.Value) {
	t := v.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		if sf.Anonymous && sf.Type.Kind() == reflect.Struct {
			tomlFields(v.Field(i), fields)
			continue
		}
		if name := sf.Tag.Get("toml"); name != "" && name != "-" {
			fields[name] = v.Field(i)
		}
	}
}

func (d *decoder) value(key keyPath, data any, v reflect.Value) error {
	if u, ok := v.Addr().Interface().(toml.Unmarshaler); ok {
		if err := u.UnmarshalTOML(data); err != nil {
			return d.errorf(key, "%v", err)
		}
		return nil
	}
	mismatch := func(want string) error {
		return d.errorf(key, "expected %s, got %s", want, tomlType(data))
	}
	switch v.Kind() {
	case reflect.String:
		s, ok := data.(string)
		if !ok {
			return mismatch("string")
		}
		v.SetString(s)
	case reflect.Bool:
		b, ok := data.(bool)
		if !ok {
			return mismatch("boolean")
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int64:
		n, ok := data.(int64)
		if !ok {
			return mismatch("integer")
		}
		if v.OverflowInt(n) {
			return d.errorf(key, "%d is out of range", n)
		}
		v.SetInt(n)
	case reflect.Slice:
		elems := reflect.ValueOf(data)
		if elems.Kind() != reflect.Slice {
			return mismatch("array")
		}
		out := reflect.MakeSlice(v.Type(), elems.Len(), elems.Len())
		for i := range elems.Len() {
			if err := d.value(key.element(i), elems.Index(i).Interface(), out.Index(i)); err != nil {
				return err
			}
		}
		v.Set(out)
	case reflect.Struct:
		tree, ok := data.(map[string]any)
		if !ok {
			return mismatch("table")
		}
		return d.table(key, tree, v)
	case reflect.Map:
		tree, ok := data.(map[string]any)
		if !ok {
			return mismatch("table")
		}
		out := reflect.MakeMapWithSize(v.Type(), len(tree))
		for _, name := range sortedKeys(tree) {
			elem := reflect.New(v.Type().Elem()).Elem()
			if err := d.value(key.child(name), tree[name], elem); err != nil {
				return err
			}
			out.SetMapIndex(reflect.ValueOf(name).Convert(v.Type().Key()), elem)
		}
		v.Set(out)
	default:
		return fmt.Errorf("%s: config field of unsupported type %s", key, v.Type())
	}
	return nil
}

// errorf returns an error naming the key and, when it can be known, its line.
func (d *decoder) errorf(key keyPath, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if line := d.line(key); line > 0 {
		return fmt.Errorf("line %d: %s: %s", line, key, msg)
	}
	return fmt.Errorf("%s: %s", key, msg)
}

// line returns the line of key in the document, or 0 if unknown. The TOML library records
// key positions but exposes them only in the error it wraps around a failing Unmarshaler,
// so line decodes the document into a type that fails exactly at key. The library keeps
// one position per dotted key, so a key repeated in several [[table]] elements has no line.
func (d *decoder) line(key keyPath) int {
	dotted := key.dotted()
	n := 0
	for _, k := range d.keys {
		if k.String() == dotted {
			n++
		}
	}
	if n != 1 {
		return 0
	}
	t := reflect.TypeFor[failAtKey]()
	for i := len(key) - 1; i >= 0; i-- {
		if key[i].index >= 0 && i < len(key)-1 {
			t = reflect.SliceOf(t) // an array of tables, not the array at key itself
		}
		t = reflect.StructOf([]reflect.StructField{{
			Name: "F",
			Type: t,
			Tag:  reflect.StructTag(fmt.Sprintf("toml:%q", key[i].name)),
		}})
	}
	_, err := toml.Decode(d.doc, reflect.New(t).Interface())
	var pe toml.ParseError
	if errors.As(err, &pe) && pe.LastKey == dotted {
		return pe.Position.Line
	}
	return 0
}

type failAtKey struct{}

func (*failAtKey) UnmarshalTOML(any) error { return errors.New("found") }

// tomlType names the TOML type of a decoded value, for error messages.
func tomlType(data any) string {
	switch data.(type) {
	case string:
		return "string"
	case int64:
		return "integer"
	case float64:
		return "float"
	case bool:
		return "boolean"
	case time.Time:
		return "datetime"
	case []any, []map[string]any:
		return "array"
	case map[string]any:
		return "table"
	}
	return fmt.Sprintf("%T", data)
}

func sortedKeys(m map[string]any) []string {
	return slices.Sorted(maps.Keys(m))
}

// UnmarshalTOML accepts integer seconds or a duration string such as "1m30s".
func (d *Duration) UnmarshalTOML(data any) error {
	var v time.Duration
	switch data := data.(type) {
	case int64:
		if data < 0 {
			return fmt.Errorf("duration must not be negative, got %d", data)
		}
		if data > math.MaxInt64/int64(time.Second) {
			return fmt.Errorf("%d seconds is out of range", data)
		}
		v = time.Duration(data) * time.Second
	case string:
		var err error
		if v, err = time.ParseDuration(data); err != nil {
			return fmt.Errorf("invalid duration %q: want integer seconds or a duration such as \"30s\" or \"5m\"", data)
		}
	default:
		return fmt.Errorf("expected integer seconds or duration string, got %s", tomlType(data))
	}
	if v < 0 {
		return fmt.Errorf("duration must not be negative, got %v", v)
	}
	d.Duration = v
	return nil
}
