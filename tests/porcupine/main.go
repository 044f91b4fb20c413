// Porcupine (github.com/anishathalye/porcupine), the reference
// linearizability checker, on histories in the form `soak history
// --format porcupine` writes: a JSON array of Porcupine's Operations
// whose input and output are a key-value register's.
//
//	porcupine [-timeout 60s] FILE...
//
// prints, for each file, `FILE VERDICT SECONDS` (VERDICT: ok, illegal,
// unknown), and exits 0. The tests compare its verdicts with soak's; the
// benchmark (bench/history.sh) times both on the same files.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/anishathalye/porcupine"
)

type input struct {
	Op    string // read, write, delete, cas, append
	Key   string
	Value *string
	From  *string
}

type output struct {
	Value   *string
	Ok      bool
	Unknown bool
}

type operation struct {
	ClientId int
	Input    input
	Call     int64
	Output   output
	Return   int64
}

// A register's value; a missing key is not ok.
type state struct {
	v  string
	ok bool
}

func same(s state, v *string) bool {
	if v == nil {
		return !s.ok
	}
	// Porcupine's key-value model reads a missing key as "".
	return (s.ok && s.v == *v) || (!s.ok && *v == "")
}

var model = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(input).Key
			if _, seen := byKey[k]; !seen {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		var parts [][]porcupine.Operation
		for _, k := range keys {
			parts = append(parts, byKey[k])
		}
		return parts
	},
	Init: func() interface{} { return state{} },
	Step: func(st, in, out interface{}) (bool, interface{}) {
		s := st.(state)
		i := in.(input)
		o := out.(output)
		switch i.Op {
		case "read":
			return o.Unknown || same(s, o.Value), s
		case "write":
			return true, state{*i.Value, true}
		case "delete":
			return true, state{}
		case "cas":
			matched := same(s, i.From)
			next := s
			if matched {
				next = state{*i.Value, true}
			}
			return o.Unknown || matched == o.Ok, next
		case "append":
			return true, state{s.v + *i.Value, true}
		}
		return false, s
	},
	Equal: func(a, b interface{}) bool { return a.(state) == b.(state) },
}

func main() {
	timeout := flag.Duration("timeout", 0, "give up (verdict unknown) after this long; 0: never")
	flag.Parse()
	for _, file := range flag.Args() {
		data, err := os.ReadFile(file)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		var ops []operation
		if err := json.Unmarshal(data, &ops); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", file, err)
			os.Exit(2)
		}
		history := make([]porcupine.Operation, len(ops))
		for i, op := range ops {
			history[i] = porcupine.Operation{ClientId: op.ClientId, Input: op.Input, Call: op.Call, Output: op.Output, Return: op.Return}
		}
		began := time.Now()
		res := porcupine.CheckOperationsTimeout(model, history, *timeout)
		took := time.Since(began).Seconds()
		verdict := map[porcupine.CheckResult]string{porcupine.Ok: "ok", porcupine.Illegal: "illegal", porcupine.Unknown: "unknown"}[res]
		fmt.Printf("%s %s %.6f\n", file, verdict, took)
	}
}
