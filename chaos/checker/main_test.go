package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

func s(v string) *string { return &v }

func ops(t *testing.T, rs []Record) []porcupine.Operation {
	t.Helper()
	var out []porcupine.Operation
	for _, r := range rs {
		op, keep, err := ToOperation(r)
		if err != nil {
			t.Fatal(err)
		}
		if keep {
			out = append(out, op)
		}
	}
	return out
}

func check(t *testing.T, rs []Record) porcupine.CheckResult {
	t.Helper()
	res, _, err := Check(ops(t, rs), 10*time.Second, "", "")
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestSequentialHistoryIsLinearizable(t *testing.T) {
	h := []Record{
		{Client: 0, Op: "set", Key: "a", Value: s("1"), Call: 0, Ret: 10, Status: "ok"},
		{Client: 1, Op: "get", Key: "a", Value: s("1"), Found: true, Call: 20, Ret: 30, Status: "ok"},
		{Client: 0, Op: "cas", Key: "a", Expected: s("1"), Value: s("2"), Applied: true, Call: 40, Ret: 50, Status: "ok"},
		{Client: 1, Op: "cas", Key: "a", Expected: s("1"), Value: s("3"), Applied: false, Call: 60, Ret: 70, Status: "ok"},
		{Client: 1, Op: "get", Key: "a", Value: s("2"), Found: true, Call: 80, Ret: 90, Status: "ok"},
		{Client: 2, Op: "get", Key: "b", Found: false, Call: 0, Ret: 5, Status: "ok"},
	}
	if r := check(t, h); r != porcupine.Ok {
		t.Fatalf("got %v", r)
	}
}

func TestStaleReadIsCaught(t *testing.T) {
	h := []Record{
		{Client: 0, Op: "set", Key: "a", Value: s("1"), Call: 0, Ret: 10, Status: "ok"},
		{Client: 0, Op: "set", Key: "a", Value: s("2"), Call: 20, Ret: 30, Status: "ok"},
		{Client: 1, Op: "get", Key: "a", Value: s("1"), Found: true, Call: 40, Ret: 50, Status: "ok"},
	}
	if r := check(t, h); r != porcupine.Illegal {
		t.Fatalf("a stale read passed: %v", r)
	}
}

func TestLostAcknowledgedWriteIsCaught(t *testing.T) {
	h := []Record{
		{Client: 0, Op: "set", Key: "a", Value: s("1"), Call: 0, Ret: 10, Status: "ok"},
		{Client: 1, Op: "get", Key: "a", Found: false, Call: 20, Ret: 30, Status: "ok"},
	}
	if r := check(t, h); r != porcupine.Illegal {
		t.Fatalf("a lost write passed: %v", r)
	}
}

func TestCasThatLiesAboutApplyingIsCaught(t *testing.T) {
	h := []Record{
		{Client: 0, Op: "set", Key: "a", Value: s("1"), Call: 0, Ret: 10, Status: "ok"},
		{Client: 1, Op: "cas", Key: "a", Expected: s("9"), Value: s("2"), Applied: true, Call: 20, Ret: 30, Status: "ok"},
	}
	if r := check(t, h); r != porcupine.Illegal {
		t.Fatalf("got %v", r)
	}
}

func TestIndeterminateWritesMayOrMayNotHappen(t *testing.T) {
	// A timed-out set that took effect, and one that did not: both fine.
	took := []Record{
		{Client: 0, Op: "set", Key: "a", Value: s("1"), Call: 0, Status: "unknown"},
		{Client: 1, Op: "get", Key: "a", Value: s("1"), Found: true, Call: 20, Ret: 30, Status: "ok"},
	}
	didnt := []Record{
		{Client: 0, Op: "set", Key: "a", Value: s("1"), Call: 0, Status: "unknown"},
		{Client: 1, Op: "get", Key: "a", Found: false, Call: 20, Ret: 30, Status: "ok"},
	}
	for _, h := range [][]Record{took, didnt} {
		if r := check(t, h); r != porcupine.Ok {
			t.Fatalf("got %v", r)
		}
	}
	// A failed set (no effect guaranteed) is left out, so reading it is a violation.
	failed := []Record{
		{Client: 0, Op: "set", Key: "a", Value: s("1"), Call: 0, Ret: 10, Status: "fail"},
		{Client: 1, Op: "get", Key: "a", Value: s("1"), Found: true, Call: 20, Ret: 30, Status: "ok"},
	}
	if r := check(t, failed); r != porcupine.Illegal {
		t.Fatalf("got %v", r)
	}
}

func TestViolationsNameTheKeyAndWriteAVisualisation(t *testing.T) {
	dir := t.TempDir()
	h := []Record{
		{Client: 0, Op: "set", Key: "good", Value: s("1"), Call: 0, Ret: 10, Status: "ok"},
		{Client: 0, Op: "set", Key: "bad", Value: s("1"), Call: 0, Ret: 10, Status: "ok"},
		{Client: 1, Op: "get", Key: "bad", Found: false, Call: 20, Ret: 30, Status: "ok"},
	}
	res, bad, err := Check(ops(t, h), 10*time.Second, dir, "run")
	if err != nil {
		t.Fatal(err)
	}
	if res != porcupine.Illegal || len(bad) != 1 || bad[0].Key != "bad" {
		t.Fatalf("got %v %+v", res, bad)
	}
	b, err := os.ReadFile(filepath.Join(dir, "run.html"))
	if err != nil || !strings.Contains(string(b), "<html") {
		t.Fatalf("no visualisation: %v", err)
	}
}

func TestMalformedLinesAreErrors(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "h.jsonl")
	if err := os.WriteFile(p, []byte("{\"op\":\"frobnicate\",\"key\":\"a\",\"status\":\"ok\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := ReadHistory(p); err == nil {
		t.Fatal("an unknown op was accepted")
	}
}
