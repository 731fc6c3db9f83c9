package config

import (
	"fmt"
	"reflect"

	"github.com/BurntSushi/toml"
)

// mergeHardening moves the [sandbox] hardening keys of doc, already decoded
// into c.Sandbox, into c.Docker.Hardening, where they are kept; [docker]
// gives the same keys under their former names. A key given in both with
// different values is an error: neither silently wins.
func mergeHardening(c *Config, doc string) error {
	md, err := toml.Decode(doc, new(map[string]any))
	if err != nil {
		return err // decode reported it already
	}
	sv := reflect.ValueOf(&c.Sandbox.Hardening).Elem()
	dv := reflect.ValueOf(&c.Docker.Hardening).Elem()
	for i := range sv.NumField() {
		key := sv.Type().Field(i).Tag.Get("toml")
		inSandbox, inDocker := md.IsDefined("sandbox", key), md.IsDefined("docker", key)
		switch {
		case inSandbox && inDocker && !reflect.DeepEqual(sv.Field(i).Interface(), dv.Field(i).Interface()):
			return fmt.Errorf("sandbox.%s and docker.%s disagree; set one ([docker] keeps the key as an alias of [sandbox])", key, key)
		case inSandbox:
			dv.Field(i).Set(sv.Field(i))
		}
	}
	return nil
}
