package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"

	"github.com/flowfabric/ffd"
)

// decodeFlowFile reads a flow file (docs/schedules.md): ffd.SubmitFlowParams
// as JSON, its Go field names as keys, strictly (a key it does not know
// is refused: a misspelt Edges would otherwise drop every edge in
// silence). A person writes it, so it also takes what Go's own encoding
// does not: a duration as a Go duration string ("5s", "1m30s") as well
// as in nanoseconds, and a payload or result as any JSON value (a string
// is still Go's base64). Errors say where: a syntax error by line and
// column, a value of the wrong type by its path.
func decodeFlowFile(name string, b []byte) (*ffd.SubmitFlowParams, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, badArg("--flow-file %s: %s", name, jsonErrorAt(b, err))
	}
	if dec.More() {
		return nil, badArg("--flow-file %s: more than one JSON value", name)
	}
	typ := reflect.TypeFor[ffd.SubmitFlowParams]()
	tree, err := humanJSON(tree, typ, "")
	if err != nil {
		return nil, badArg("--flow-file %s: %v", name, err)
	}
	plain, err := json.Marshal(tree)
	if err != nil {
		return nil, badArg("--flow-file %s: %v", name, err)
	}
	strict := json.NewDecoder(bytes.NewReader(plain))
	strict.DisallowUnknownFields()
	var fp ffd.SubmitFlowParams
	if err := strict.Decode(&fp); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, badArg("--flow-file %s: %s: want %s, found a JSON %s", name, te.Field, te.Type, te.Value)
		}
		return nil, badArg("--flow-file %s: %s", name, strings.TrimPrefix(err.Error(), "json: "))
	}
	return &fp, nil
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	bytesType    = reflect.TypeFor[[]byte]()
)

// humanJSON rewrites the decoded JSON value v meant for a Go value of type
// t into what encoding/json decodes into t: duration strings into
// nanoseconds, JSON values for []byte into their text's base64. Keys it
// does not find in t are left for the strict decoder to refuse.
func humanJSON(v any, t reflect.Type, path string) (any, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == durationType:
		s, ok := v.(string)
		if !ok {
			return v, nil
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a duration (such as 5s, 1m30s, or nanoseconds)", path, s)
		}
		return int64(d), nil
	case t == bytesType:
		if _, ok := v.(string); ok || v == nil {
			return v, nil
		}
		return json.Marshal(v) // marshalled again as []byte: base64 of the JSON text
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return v, nil
		}
		for k, val := range obj {
			f, ok := fieldByJSONName(t, k)
			if !ok {
				continue
			}
			conv, err := humanJSON(val, f.Type, join(path, k))
			if err != nil {
				return nil, err
			}
			obj[k] = conv
		}
	case reflect.Slice, reflect.Array:
		arr, ok := v.([]any)
		if !ok {
			return v, nil
		}
		for i := range arr {
			conv, err := humanJSON(arr[i], t.Elem(), fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			arr[i] = conv
		}
	case reflect.Map:
		obj, ok := v.(map[string]any)
		if !ok {
			return v, nil
		}
		for k, val := range obj {
			conv, err := humanJSON(val, t.Elem(), join(path, k))
			if err != nil {
				return nil, err
			}
			obj[k] = conv
		}
	}
	return v, nil
}

// fieldByJSONName finds the field of struct t that encoding/json decodes
// key into: its json tag's name, else its Go name, either case-blind.
func fieldByJSONName(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name := f.Name
		if tag, _, _ := strings.Cut(f.Tag.Get("json"), ","); tag == "-" {
			continue
		} else if tag != "" {
			name = tag
		}
		if strings.EqualFold(name, key) {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// jsonErrorAt says where in b a decoding error is: "line L, column C: ..."
// for a syntax error, the message otherwise.
func jsonErrorAt(b []byte, err error) string {
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return "empty, or cut short: not a JSON value"
		}
		return strings.TrimPrefix(err.Error(), "json: ")
	}
	line, col := 1, 1
	for _, c := range b[:max(0, min(int(se.Offset), len(b))-1)] {
		if c == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return fmt.Sprintf("line %d, column %d: %s", line, col, se.Error())
}
