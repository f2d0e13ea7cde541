// Command enums prints the enumerations of the OpenAPI document that the decider
// defines, as JSON, for api/openapi/gen.py: the policy names and the reason codes, in
// the decider's table order. The generator reads them from here rather than keeping
// a copy, so a policy added to the decider reaches the document by regenerating it.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/pdrouter/pdrouter/decider"
)

// enums is the JSON the generator reads.
type enums struct {
	Policies []string         `json:"policies"`
	Reasons  []decider.Reason `json:"reasons"`
}

func main() {
	b, err := json.Marshal(enums{Policies: decider.PolicyNames(), Reasons: decider.Reasons()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "enums:", err)
		os.Exit(1)
	}
	fmt.Println(string(b))
}
