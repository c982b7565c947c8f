package audit

import (
	"encoding/json"
	"regexp"

	"github.com/mcpvisor/mcpvisor/host/recovery"
)

// redacted replaces a secret.
const redacted = "[redacted]"

// secretKey matches object keys whose values are secrets whatever they
// look like.
var secretKey = regexp.MustCompile(`(?i)^(.*[_-])?(password|passwd|passphrase|secret|token|access[_-]?token|refresh[_-]?token|api[_-]?key|apikey|authorization|auth|cookie|credentials?|private[_-]?key|client[_-]?secret)$`)

// secretShapes match well-known credential formats inside any string.
var secretShapes = []*regexp.Regexp{
	regexp.MustCompile(`\bgh[pousr]_[A-Za-z0-9]{20,}\b`),                               // GitHub tokens
	regexp.MustCompile(`\bgithub_pat_[A-Za-z0-9_]{20,}\b`),                             // GitHub fine-grained tokens
	regexp.MustCompile(`\bsk-[A-Za-z0-9_-]{20,}\b`),                                    // OpenAI / Anthropic style keys
	regexp.MustCompile(`\bxox[abposr]-[A-Za-z0-9-]{10,}\b`),                            // Slack tokens
	regexp.MustCompile(`\b(AKIA|ASIA)[0-9A-Z]{16}\b`),                                  // AWS access key ids
	regexp.MustCompile(`\bAIza[0-9A-Za-z_-]{35}\b`),                                    // Google API keys
	regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]+`), // JWTs
	regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z ]*PRIVATE KEY-----|$)`),
}

// secretAssignment matches "password=…", "api_key: …" and the like in
// free text; the name is kept.
var secretAssignment = regexp.MustCompile(`(?i)\b((?:access_|refresh_)?token|api[_-]?key|apikey|secret|client_secret|password|passwd)(\s*[=:]\s*)[^\s&"',;]+`)

// RedactText removes credentials from free text: what recovery.Redact
// removes (bearer tokens, Authorization values, token= query values),
// secret-named assignments and the well-known token formats.
func RedactText(s string) string {
	s = recovery.Redact(s)
	s = secretAssignment.ReplaceAllString(s, "${1}${2}"+redacted)
	for _, re := range secretShapes {
		s = re.ReplaceAllString(s, redacted)
	}
	return s
}

// RedactJSON returns JSON b with the values of secret-named keys replaced
// and every string redacted as RedactText does. JSON that does not decode
// is replaced as a whole, since it cannot be inspected.
func RedactJSON(b []byte) json.RawMessage {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		q, _ := json.Marshal(redacted)
		return q
	}
	out, err := json.Marshal(redactValue(v))
	if err != nil {
		q, _ := json.Marshal(redacted)
		return q
	}
	return out
}

func redactValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if secretKey.MatchString(k) {
				if _, isObj := e.(map[string]any); !isObj {
					x[k] = redacted
					continue
				}
			}
			x[k] = redactValue(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = redactValue(e)
		}
		return x
	case string:
		return RedactText(x)
	}
	return v
}
