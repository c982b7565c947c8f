package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// EncodeResponse encodes a response around a result that is already encoded
// JSON (valid, as a decoded message's result is).
func EncodeResponse(id jsonrpc.ID, result json.RawMessage) []byte {
	buf := make([]byte, 0, len(result)+64)
	buf = append(buf, `{"jsonrpc":"2.0","id":`...)
	buf = AppendID(buf, id)
	buf = append(buf, `,"result":`...)
	buf = append(buf, result...)
	return append(buf, '}')
}

// AppendID appends id as JSON, as json.Marshal(id.Raw()) encodes it.
func AppendID(buf []byte, id jsonrpc.ID) []byte {
	switch v := id.Raw().(type) {
	case int64:
		return strconv.AppendInt(buf, v, 10)
	case string:
		return append(buf, Quote(v)...)
	}
	b, _ := json.Marshal(id.Raw())
	return append(buf, b...)
}

// EncodeRequest encodes a request with a string id around params that are
// already encoded JSON (valid, as a decoded message's params are).
func EncodeRequest(id, method string, params json.RawMessage) []byte {
	buf := make([]byte, 0, len(params)+len(id)+len(method)+48)
	buf = append(buf, `{"jsonrpc":"2.0","id":`...)
	buf = append(buf, Quote(id)...)
	buf = append(buf, `,"method":`...)
	buf = append(buf, Quote(method)...)
	if len(params) > 0 {
		buf = append(buf, `,"params":`...)
		buf = append(buf, params...)
	}
	return append(buf, '}')
}

// DecodeMessage decodes one message exactly as jsonrpc.DecodeMessage does
// (keys matched case-sensitively, the last of duplicate keys winning,
// trailing data after the object ignored), but keeps params and result raw
// and allocates a fraction as much: the SDK decodes them into typed values
// where it needs them, and a forwarded tools/call never needs. data may be
// reused by the caller once it returns.
func DecodeMessage(data []byte) (jsonrpc.Message, error) {
	if !Valid(data) {
		// Trailing data, or not JSON at all: the general path decides.
		return decodeMessageSlow(data)
	}
	data = bytes.Clone(data) // params and result point into it
	var version, id, method, params, result, werr []byte
	isObject := Members(data, func(key []byte, start, end int) bool {
		v := data[start:end]
		switch string(key) {
		case "jsonrpc":
			version = v
		case "id":
			id = v
		case "method":
			method = v
		case "params":
			params = v
		case "result":
			result = v
		case "error":
			werr = v
		}
		return true
	})
	if !isObject {
		return decodeMessageSlow(data)
	}
	return buildMessage(version, id, method, params, result, werr)
}

// decodeMessageSlow is DecodeMessage for input that is not one valid JSON
// value: json.Decoder reads the first value and ignores the rest, as the
// SDK's decoder does.
func decodeMessageSlow(data []byte) (jsonrpc.Message, error) {
	var m map[string]json.RawMessage
	if err := json.NewDecoder(bytes.NewReader(data)).Decode(&m); err != nil {
		return nil, fmt.Errorf("unmarshaling jsonrpc message: %w", err)
	}
	return buildMessage(m["jsonrpc"], m["id"], m["method"], m["params"], m["result"], m["error"])
}

// buildMessage makes a message of its members' raw values (nil: absent).
func buildMessage(version, rawID, method, params, result, werr []byte) (jsonrpc.Message, error) {
	if string(version) != `"2.0"` {
		var v string
		if version != nil {
			if err := json.Unmarshal(version, &v); err != nil {
				return nil, fmt.Errorf("unmarshaling jsonrpc message: %w", err)
			}
		}
		if v != "2.0" {
			return nil, fmt.Errorf("invalid message version tag %q; expected %q", v, "2.0")
		}
	}
	var idv any
	if n, ok := smallInt(rawID); ok {
		idv = float64(n) // as json.Unmarshal makes it
	} else if len(rawID) > 0 && rawID[0] == '"' {
		idv = Unquote(rawID)
	} else if rawID != nil {
		if err := json.Unmarshal(rawID, &idv); err != nil {
			return nil, fmt.Errorf("unmarshaling jsonrpc message: %w", err)
		}
	}
	id, err := jsonrpc.MakeID(idv)
	if err != nil {
		return nil, err
	}
	if method != nil {
		var name string
		if method[0] == '"' {
			name = Unquote(method)
		} else if err := json.Unmarshal(method, &name); err != nil {
			return nil, fmt.Errorf("unmarshaling jsonrpc message: %w", err)
		}
		return &jsonrpc.Request{Method: name, ID: id, Params: params}, nil
	}
	if !id.IsValid() {
		return nil, errors.New("invalid request: a response without an id")
	}
	resp := &jsonrpc.Response{ID: id, Result: result}
	if werr != nil && string(werr) != "null" {
		e, err := decodeError(werr)
		if err != nil {
			return nil, fmt.Errorf("unmarshaling jsonrpc message: %w", err)
		}
		resp.Error = e
	}
	return resp, nil
}

// smallInt parses an integer literal of at most 15 digits (exact as a
// float64); anything else is left to encoding/json.
func smallInt(b []byte) (int64, bool) {
	digits := b
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 15 || (digits[0] == '0' && len(digits) > 1) {
		return 0, false
	}
	var n int64
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if len(digits) < len(b) {
		n = -n
	}
	return n, true
}

// decodeError decodes an error object with case-sensitive keys.
func decodeError(raw json.RawMessage) (*jsonrpc.Error, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	var e jsonrpc.Error
	if v, ok := m["code"]; ok {
		if err := json.Unmarshal(v, &e.Code); err != nil {
			return nil, err
		}
	}
	if v, ok := m["message"]; ok {
		if err := json.Unmarshal(v, &e.Message); err != nil {
			return nil, err
		}
	}
	if v, ok := m["data"]; ok && string(v) != "null" {
		e.Data = v
	}
	return &e, nil
}
