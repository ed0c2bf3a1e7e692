package main

import (
	"fmt"
	"math"
	"sort"

	"github.com/anishathalye/porcupine"
)

// Input of an operation on one key.
type Input struct {
	Op       string // "get", "set" or "cas"
	Key      string
	Value    string // set, cas: the value written
	Expected string // cas: the value compared with
}

// Output of an operation; Unknown when its reply never arrived.
type Output struct {
	Unknown bool
	Found   bool   // get
	Value   string // get
	Applied bool   // cas
}

// State of one key: absent, or a value.
type State struct {
	Present bool
	Value   string
}

// ToOperation converts a record; keep is false for operations that failed
// without effect.
func ToOperation(r Record) (op porcupine.Operation, keep bool, err error) {
	in := Input{Op: r.Op, Key: r.Key}
	switch r.Op {
	case "get":
	case "set":
		if r.Value == nil {
			return op, false, fmt.Errorf("set without a value")
		}
		in.Value = *r.Value
	case "cas":
		if r.Value == nil || r.Expected == nil {
			return op, false, fmt.Errorf("cas needs value and expected")
		}
		in.Value, in.Expected = *r.Value, *r.Expected
	default:
		return op, false, fmt.Errorf("unknown op %q", r.Op)
	}
	out := Output{}
	ret := r.Ret
	switch r.Status {
	case "ok":
		out.Found = r.Found
		if r.Value != nil && r.Op == "get" {
			out.Value = *r.Value
		}
		out.Applied = r.Applied
	case "fail":
		return op, false, nil
	case "unknown":
		out.Unknown = true
		ret = math.MaxInt64
	default:
		return op, false, fmt.Errorf("unknown status %q", r.Status)
	}
	if r.Status == "ok" && ret < r.Call {
		return op, false, fmt.Errorf("returns (%d) before it is called (%d)", ret, r.Call)
	}
	return porcupine.Operation{ClientId: r.Client, Input: in, Call: r.Call, Output: out, Return: ret}, true, nil
}

// KvModel: a register per key; get reads it, set writes it, cas writes it
// only when it holds the expected value (and says whether it did). An
// operation whose reply never arrived may have any outcome.
var KvModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		for _, op := range history {
			k := op.Input.(Input).Key
			byKey[k] = append(byKey[k], op)
		}
		keys := make([]string, 0, len(byKey))
		for k := range byKey {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() interface{} { return State{} },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		s := state.(State)
		in := input.(Input)
		out := output.(Output)
		switch in.Op {
		case "get":
			if out.Unknown {
				return true, s
			}
			if !out.Found {
				return !s.Present, s
			}
			return s.Present && s.Value == out.Value, s
		case "set":
			return true, State{Present: true, Value: in.Value}
		case "cas":
			holds := s.Present && s.Value == in.Expected
			if out.Unknown {
				if holds {
					return true, State{Present: true, Value: in.Value}
				}
				return true, s
			}
			if out.Applied != holds {
				return false, s
			}
			if holds {
				return true, State{Present: true, Value: in.Value}
			}
			return true, s
		}
		return false, s
	},
	DescribeOperation: func(input, output interface{}) string {
		in := input.(Input)
		out := output.(Output)
		res := ""
		switch {
		case out.Unknown:
			res = "?"
		case in.Op == "get" && !out.Found:
			res = "nil"
		case in.Op == "get":
			res = fmt.Sprintf("%q", out.Value)
		case in.Op == "cas":
			res = fmt.Sprintf("applied=%v", out.Applied)
		default:
			res = "OK"
		}
		switch in.Op {
		case "get":
			return fmt.Sprintf("get(%s) -> %s", in.Key, res)
		case "set":
			return fmt.Sprintf("set(%s, %q) -> %s", in.Key, in.Value, res)
		default:
			return fmt.Sprintf("set(%s, %q IFEQ %q) -> %s", in.Key, in.Value, in.Expected, res)
		}
	},
	DescribeState: func(state interface{}) string {
		s := state.(State)
		if !s.Present {
			return "nil"
		}
		return fmt.Sprintf("%q", s.Value)
	},
}
