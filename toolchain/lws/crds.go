//go:build tools

// Package crds pins the module whose CRD the tests install.
package crds

import _ "sigs.k8s.io/lws/api/leaderworkerset/v1"
