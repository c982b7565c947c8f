package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

func RawResponse(id jsonrpc.ID, result json.RawMessage) []byte {
	buf := make([]byte, 0, len(result)+64)
	buf = append(buf, `{"jsonrpc":"2.0","id":`...)
	buf = AppendID(buf, id)
	buf = append(buf, `,"result":`...)
	buf = append(buf, result...)
	return append(buf, '}')
}

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

func RawRequest(id, method string, params json.RawMessage) []byte {
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

func DecodeMessage(data []byte) (jsonrpc.Message, error) {
	return decodeMessage(data, true)
}

func DecodeOwnedMessage(data []byte) (jsonrpc.Message, error) {
	return decodeMessage(data, false)
}

func decodeMessage(data []byte, clone bool) (jsonrpc.Message, error) {
	if !Valid(data) {
		// Trailing data, or not JSON at all: the general path decides.
		return decodeMessageSlow(data)
	}
	if clone {
		data = bytes.Clone(data) // params and result point into it
	}
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

func decodeMessageSlow(data []byte) (jsonrpc.Message, error) {
	var m map[string]json.RawMessage
	if err := json.NewDecoder(bytes.NewReader(data)).Decode(&m); err != nil {
		return nil, fmt.Errorf("unmarshaling jsonrpc message: %w", err)
	}
	return buildMessage(m["jsonrpc"], m["id"], m["method"], m["params"], m["result"], m["error"])
}

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
