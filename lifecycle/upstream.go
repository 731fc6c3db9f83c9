package lifecycle

import "strings"

// CodeTemplateUnsupported is upstream's FSB_UNSUPPORTED (fast-sandbox
// templates), answered with 501 where there are no templates.
const CodeTemplateUnsupported = "FSB::API_NOT_SUPPORTED"

// TemplatesUnsupported is the answer to every template route and to a
// create naming a template: fast-sandbox templates are Kubernetes golden
// images of upstream's fast-sandbox controller, which sandboxd has on no
// runtime. On Docker the message is upstream's own.
func TemplatesUnsupported(runtime string) *Error {
	msg := "Template management requires the kubernetes runtime."
	if runtime != "docker" {
		msg = "Template management (fast-sandbox templates) is not implemented by sandboxd."
	}
	return errf(KindNotImplemented, CodeTemplateUnsupported, "%s", msg)
}

// checkUpstreamOnly answers a create that asks for an upstream 1.1.1
// feature sandboxd lacks, in upstream's order: its schema's cross-field
// rules on credentialProxy first (422), then a template (501, before the
// image or snapshot is looked at, as upstream skips their resolution), then
// the credential proxy itself (400): a request relying on it is refused
// rather than run without the credentials it expects.
func checkUpstreamOnly(req CreateRequest, runtime string) error {
	proxy := req.CredentialProxy != nil && req.CredentialProxy.Enabled
	unprocessable := func(msg string) error {
		return &Error{Kind: KindUnprocessable, Code: CodeInvalidParameter, Message: msg, Field: []string{"body"}}
	}
	switch {
	case proxy && req.NetworkPolicy == nil:
		return unprocessable("Value error, credentialProxy.enabled requires networkPolicy.")
	case proxy && hasKey(req.Extensions, ExtPoolRef):
		return unprocessable("Value error, credentialProxy.enabled cannot be used together with poolRef.")
	case strings.TrimSpace(req.TemplateID) != "":
		return TemplatesUnsupported(runtime)
	case proxy:
		return errf(KindInvalid, CodeInvalidParameter, "credentialProxy is not supported when runtime.type='%s': sandboxd does not inject credentials into egress traffic", runtime)
	}
	return nil
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}
