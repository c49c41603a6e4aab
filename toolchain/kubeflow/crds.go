//go:build tools

// Package crds pins the module whose CRD the tests install.
package crds

import _ "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
