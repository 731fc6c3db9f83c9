package lifecycle

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
)

// EgressAuthHeader carries a sandbox's egress credential on port 18080,
// as upstream's sidecar takes it (OPENSANDBOX_EGRESS_TOKEN).
const EgressAuthHeader = "OPENSANDBOX-EGRESS-AUTH"

// EgressToken returns the credential of sandbox id's egress API: the
// 18080 endpoint's header, which the SDKs send with their egress calls.
// It is not the execd token: whoever drives the sandbox with that one
// (an agent, code it runs) must not lift the key holder's policy.
func (s *Sandboxes) EgressToken(id string) string {
	mac := hmac.New(sha256.New, s.tokenKey)
	mac.Write([]byte("egress-token:" + id))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// CheckEgressToken reports whether tok opens sandbox id's egress API
// (constant time).
func (s *Sandboxes) CheckEgressToken(id, tok string) bool {
	return tok != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(s.EgressToken(id))) == 1
}
