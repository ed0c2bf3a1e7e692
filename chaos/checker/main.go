// Command checker reads histories recorded by Ferrite's fault-injection
// harness (crates/ferrite-chaos) and checks them for linearizability with
// Porcupine, key by key, against a key-value model that understands
// compare-and-set. For a history that is not linearizable it writes
// Porcupine's HTML visualisation next to the history file.
//
// Usage: checker [-timeout 60s] [-html-dir DIR] HISTORY.jsonl...
//
// Each line of a history file is one completed or abandoned operation:
//
//	{"client":3,"op":"get","key":"k1","call":123,"ret":456,"status":"ok","found":true,"value":"v"}
//	{"client":1,"op":"set","key":"k1","value":"v2","call":130,"ret":470,"status":"ok"}
//	{"client":2,"op":"cas","key":"k1","expected":"v2","value":"v3","call":140,"ret":490,"status":"ok","applied":true}
//
// call and ret are monotonic nanoseconds. status is "ok" (the reply was
// received), "fail" (an error reply that guarantees the operation had no
// effect; such operations are left out) or "unknown" (a timeout or a dropped
// connection: the operation may or may not have taken effect, so it is
// given an open end and any outcome).
//
// It prints one JSON summary on stdout and exits 0 when every history is
// linearizable, 1 when one is not, 2 when a check did not finish in time or
// the input is malformed.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Record is one line of a history file.
type Record struct {
	Client   int     `json:"client"`
	Op       string  `json:"op"`
	Key      string  `json:"key"`
	Value    *string `json:"value,omitempty"`
	Expected *string `json:"expected,omitempty"`
	Call     int64   `json:"call"`
	Ret      int64   `json:"ret"`
	Status   string  `json:"status"`
	Found    bool    `json:"found,omitempty"`
	Applied  bool    `json:"applied,omitempty"`
}

// Violation names a key whose history is not linearizable.
type Violation struct {
	File string `json:"file"`
	Key  string `json:"key"`
	HTML string `json:"html,omitempty"`
}

// Summary is what the checker prints.
type Summary struct {
	Files        int         `json:"files"`
	Operations   int         `json:"operations"`
	Indefinite   int         `json:"indeterminate"`
	Failed       int         `json:"failed_left_out"`
	Keys         int         `json:"keys"`
	Linearizable bool        `json:"linearizable"`
	Violations   []Violation `json:"violations"`
	TimedOut     []string    `json:"timed_out"`
}

// ReadHistory parses a history file into Porcupine operations.
func ReadHistory(path string) (ops []porcupine.Operation, indefinite, failed int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		var r Record
		if err := json.Unmarshal([]byte(text), &r); err != nil {
			return nil, 0, 0, fmt.Errorf("%s:%d: %v", path, line, err)
		}
		op, keep, err := ToOperation(r)
		if err != nil {
			return nil, 0, 0, fmt.Errorf("%s:%d: %v", path, line, err)
		}
		switch {
		case !keep:
			failed++
		default:
			if r.Status == "unknown" {
				indefinite++
			}
			ops = append(ops, op)
		}
	}
	return ops, indefinite, failed, sc.Err()
}

// Check checks one history; it returns the result and, for a violation,
// the keys that fail with the visualisation written under htmlDir.
func Check(ops []porcupine.Operation, timeout time.Duration, htmlDir, stem string) (porcupine.CheckResult, []Violation, error) {
	res, info := porcupine.CheckOperationsVerbose(KvModel, ops, timeout)
	if res != porcupine.Illegal {
		return res, nil, nil
	}
	// Which keys fail: check each partition alone.
	var out []Violation
	for _, part := range KvModel.Partition(ops) {
		if porcupine.CheckOperationsTimeout(KvModel, part, timeout) != porcupine.Illegal {
			continue
		}
		key := part[0].Input.(Input).Key
		out = append(out, Violation{Key: key})
	}
	if htmlDir != "" {
		path := filepath.Join(htmlDir, stem+".html")
		if err := porcupine.VisualizePath(KvModel, info, path); err != nil {
			return res, out, err
		}
		for i := range out {
			out[i].HTML = path
		}
	}
	return res, out, nil
}

func main() {
	timeout := flag.Duration("timeout", 60*time.Second, "time limit per history")
	htmlDir := flag.String("html-dir", "", "where to write visualisations of failing histories (default: beside each history)")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: checker [-timeout 60s] [-html-dir DIR] HISTORY.jsonl...")
		os.Exit(2)
	}
	sum := Summary{Linearizable: true, Violations: []Violation{}, TimedOut: []string{}}
	keys := map[string]bool{}
	exit := 0
	for _, path := range flag.Args() {
		ops, ind, failed, err := ReadHistory(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "checker:", err)
			os.Exit(2)
		}
		sum.Files++
		sum.Operations += len(ops)
		sum.Indefinite += ind
		sum.Failed += failed
		for _, o := range ops {
			keys[o.Input.(Input).Key] = true
		}
		dir := *htmlDir
		if dir == "" {
			dir = filepath.Dir(path)
		}
		stem := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
		res, bad, err := Check(ops, *timeout, dir, stem)
		if err != nil {
			fmt.Fprintln(os.Stderr, "checker: writing the visualisation:", err)
		}
		switch res {
		case porcupine.Illegal:
			sum.Linearizable = false
			for _, v := range bad {
				v.File = path
				sum.Violations = append(sum.Violations, v)
			}
			exit = 1
		case porcupine.Unknown:
			sum.TimedOut = append(sum.TimedOut, path)
			if exit == 0 {
				exit = 2
			}
		}
	}
	sum.Keys = len(keys)
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(sum)
	os.Exit(exit)
}
