// A module of its own, so that the validator's dependencies stay out of mempo's: the
// offline Kubernetes manifest check pipelines/k8s_test.go runs (main.go).
module github.com/mempo/mempo/build/k8s

go 1.26

require (
	github.com/yannh/kubeconform v0.8.0
	sigs.k8s.io/yaml v1.6.0
)

require (
	github.com/hashicorp/go-cleanhttp v0.5.2 // indirect
	github.com/hashicorp/go-retryablehttp v0.7.8 // indirect
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.2 // indirect
	go.yaml.in/yaml/v2 v2.4.4 // indirect
	golang.org/x/text v0.37.0 // indirect
	k8s.io/kube-openapi v0.0.0-20260603220949-865597e52e25 // indirect
	k8s.io/utils v0.0.0-20260210185600-b8788abfbbc2 // indirect
)
