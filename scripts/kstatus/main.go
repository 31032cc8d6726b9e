// kstatus prints the status that Flux (kustomize-controller health checks) and kpt compute for
// Kubernetes objects, using the very function they use: sigs.k8s.io/cli-utils pkg/kstatus/status.Compute.
//
//	kstatus FILE...   (or stdin): YAML or JSON objects, several per file ("---"), or a v1 List
//
// One JSON line per object: {"kind":..., "name":..., "status":"Current|InProgress|Failed|...",
// "message":..., "conditions":[...]}. Exit 1 when an input cannot be read or judged.
// Built (cached) by scripts/build-tools.sh kstatus; tests/gitops run it.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

func judge(in io.Reader, out *json.Encoder) error {
	decoder := utilyaml.NewYAMLOrJSONDecoder(bufio.NewReader(in), 4096)
	for {
		var raw json.RawMessage
		if err := decoder.Decode(&raw); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if len(raw) == 0 || string(raw) == "null" {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(raw); err != nil { // integers stay int64, as from the API
			return err
		}
		items := []unstructured.Unstructured{*u}
		if u.IsList() {
			list, err := u.ToList()
			if err != nil {
				return err
			}
			items = list.Items
		}
		for i := range items {
			res, err := status.Compute(&items[i])
			if err != nil {
				return fmt.Errorf("%s/%s: %w", items[i].GetKind(), items[i].GetName(), err)
			}
			line := map[string]interface{}{"kind": items[i].GetKind(), "name": items[i].GetName(),
				"status": res.Status, "message": res.Message, "conditions": res.Conditions}
			if err := out.Encode(line); err != nil {
				return err
			}
		}
	}
}

func main() {
	out := json.NewEncoder(os.Stdout)
	inputs := os.Args[1:]
	if len(inputs) == 0 {
		inputs = []string{"-"}
	}
	for _, path := range inputs {
		in := io.Reader(os.Stdin)
		if path != "-" {
			f, err := os.Open(path)
			if err != nil {
				fmt.Fprintln(os.Stderr, "kstatus:", err)
				os.Exit(1)
			}
			defer f.Close()
			in = f
		}
		if err := judge(in, out); err != nil {
			fmt.Fprintf(os.Stderr, "kstatus: %s: %v\n", path, err)
			os.Exit(1)
		}
	}
}
