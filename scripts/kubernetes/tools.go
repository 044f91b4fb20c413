// The current Kubernetes release that scripts/kube builds from the Go module
// proxy: this module only pins k8s.io/kubernetes and its staging modules
// (go.mod's replace lines; k8s.io/kubernetes itself requires v0.0.0 of
// them) so that `go build k8s.io/kubernetes/cmd/...` resolves, with go.sum
// checking every download.
package main

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	_ "k8s.io/kubernetes/cmd/kube-scheduler/app"
	_ "k8s.io/kubernetes/cmd/kubelet/app"
	_ "k8s.io/kubectl/pkg/cmd"
)

func main() {}
