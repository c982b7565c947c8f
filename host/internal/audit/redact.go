package audit

import (
	"encoding/json"
	"regexp"
	"strings"

	"github.com/mcpvisor/mcpvisor/host/recovery"
)

// redacted replaces a secret.
const redacted = "[redacted]"

// secretKeyParts are the parts of an object key, matched anywhere in it
// and in any case, that make its whole value a secret whatever it looks
// like: authToken, sessionToken, githubToken, accessKey, secretKey, pwd,
// bearer, client_secret, x-api-key, Cookie, … Over-redacting a key that
// merely looks secret ("keyword") costs an audit reader a value; missing
// a real one leaks it for good.
var secretKeyParts = []string{"token", "secret", "passw", "pwd", "key", "auth", "bearer", "credential", "session", "cookie"}

// notSecretKeys are keys that contain a secret part but name no secret,
// by their lowercase letters only.
var notSecretKeys = map[string]bool{"author": true, "authors": true, "keyword": true, "keywords": true}

// isSecretKey reports whether the value v under key k is a secret. A
// number under a key ending in "tokens" (max_tokens, total_tokens) is a
// count of model tokens, not a credential.
func isSecretKey(k string, v any) bool {
	lower := strings.ToLower(k)
	hit := false
	for _, p := range secretKeyParts {
		if strings.Contains(lower, p) {
			hit = true
			break
		}
	}
	if !hit {
		return false
	}
	letters := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' {
			return r
		}
		return -1
	}, lower)
	if notSecretKeys[letters] {
		return false
	}
	if _, isNumber := v.(float64); isNumber && strings.HasSuffix(letters, "tokens") {
		return false
	}
	return true
}

// urlUserinfo matches the user[:password]@ of a URL
// (postgres://app:hunter2@db/…): everything up to the last @ before the
// path.
var urlUserinfo = regexp.MustCompile(`(?i)\b([a-z][a-z0-9+.-]*://)[^\s/?#"'<>]+@`)

// secretJSONMember matches a "secret-named": "string" member of JSON
// quoted inside free text (an error message that echoes a request).
var secretJSONMember = regexp.MustCompile(`(?i)("[^"\\]*(?:token|secret|passw|pwd|key|auth|bearer|credential|session|cookie)[^"\\]*"\s*:\s*)"(?:[^"\\]|\\.)*"`)

// secretKeyAssignment matches name=value in free text whose name has a
// secret part (authToken=…, db_pwd=…); the name is kept.
var secretKeyAssignment = regexp.MustCompile(`(?i)\b([a-z0-9_.-]*(?:token|secret|passw|pwd|key|auth|bearer|credential|session|cookie)[a-z0-9_.-]*=)[^\s&"',;]+`)

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
// removes (bearer tokens, Authorization values, token= query values), the
// userinfo of URLs, secret-named assignments and JSON members, and the
// well-known token formats.
func RedactText(s string) string {
	s = recovery.Redact(s)
	s = urlUserinfo.ReplaceAllString(s, "${1}"+redacted+"@")
	s = secretJSONMember.ReplaceAllString(s, "${1}\""+redacted+"\"")
	s = secretKeyAssignment.ReplaceAllString(s, "${1}"+redacted)
	s = secretAssignment.ReplaceAllString(s, "${1}${2}"+redacted)
	for _, re := range secretShapes {
		s = re.ReplaceAllString(s, redacted)
	}
	return s
}

// RedactJSON returns JSON b with the whole value of every secret-named key
// (isSecretKey) replaced, objects and arrays included, and every other
// string redacted as RedactText does. JSON that does not decode
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
			if isSecretKey(k, e) {
				x[k] = redacted
				continue
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
