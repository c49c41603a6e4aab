// Command fairsharing runs Kueue's scheduler and core controllers with fair sharing on,
// for benchmarks/versus_kueue.py: Kueue's scheduler performance runner starts it in place
// of its minimalkueue (--minimalKueue=<this binary>), so that the same scenario can be
// measured under Kueue's classic cohort preemption and under its fair sharing
// (preemption strategies LessThanOrEqualToFinalShare, then LessThanInitialShare, the
// defaults of Kueue's configuration, and admission ordered by dominant resource share).
//
// Written for Tidegate against Kueue's public packages; it takes the flags the runner
// passes (--kubeconfig, --zap-log-level) and stops on SIGINT or SIGTERM.
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	crconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	configapi "sigs.k8s.io/kueue/apis/config/v1beta2"
	kueuealpha "sigs.k8s.io/kueue/apis/kueue/v1alpha1"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	qcache "sigs.k8s.io/kueue/pkg/cache/queue"
	schdcache "sigs.k8s.io/kueue/pkg/cache/scheduler"
	"sigs.k8s.io/kueue/pkg/constants"
	"sigs.k8s.io/kueue/pkg/controller/core"
	"sigs.k8s.io/kueue/pkg/controller/core/indexer"
	"sigs.k8s.io/kueue/pkg/scheduler"
	preemptexpectations "sigs.k8s.io/kueue/pkg/scheduler/preemption/expectations"
)

func main() {
	logging := zap.Options{Development: true, Level: zapcore.ErrorLevel}
	logging.BindFlags(flag.CommandLine)
	flag.Parse()
	logger := zap.New(zap.UseFlagOptions(&logging))
	ctrl.SetLogger(logger)
	if err := serve(logger); err != nil {
		logger.Error(err, "fair-sharing Kueue stopped")
		os.Exit(1)
	}
}

func serve(logger interface{ Info(string, ...any) }) error {
	types := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(types))
	utilruntime.Must(kueue.AddToScheme(types))
	utilruntime.Must(kueuealpha.AddToScheme(types))
	utilruntime.Must(configapi.AddToScheme(types))

	restConfig, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	// Kueue's default client rate limits
	restConfig.QPS, restConfig.Burst = 50, 100

	manager, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:  types,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: crconfig.Controller{
			SkipNameValidation: ptr.To(true),
			// Kueue's default reconciler concurrency per kind
			GroupKindConcurrency: map[string]int{
				kueue.GroupVersion.WithKind("Workload").GroupKind().String():       5,
				kueue.GroupVersion.WithKind("LocalQueue").GroupKind().String():     1,
				kueue.GroupVersion.WithKind("ClusterQueue").GroupKind().String():   1,
				kueue.GroupVersion.WithKind("ResourceFlavor").GroupKind().String(): 1,
			},
		},
	})
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	fairSharing := &configapi.FairSharing{PreemptionStrategies: []configapi.PreemptionStrategy{
		configapi.LessThanOrEqualToFinalShare, configapi.LessThanInitialShare,
	}}
	settings := &configapi.Configuration{FairSharing: fairSharing}

	if err := indexer.Setup(ctx, manager.GetFieldIndexer()); err != nil {
		return err
	}
	clusterCache := schdcache.New(manager.GetClient(), schdcache.WithFairSharing(true))
	requeuer := qcache.NewRequeuer()
	if err := manager.Add(requeuer); err != nil {
		return err
	}
	expectations := preemptexpectations.New()
	queues := qcache.NewManager(manager.GetClient(), clusterCache, requeuer,
		qcache.WithPreemptionExpectations(expectations))
	go queues.CleanUpOnContext(ctx)
	go clusterCache.CleanUpOnContext(ctx)

	if _, err := core.SetupControllers(manager, queues, clusterCache, settings, nil, expectations, nil); err != nil {
		return err
	}
	admitter := scheduler.New(queues, clusterCache, manager.GetClient(),
		manager.GetEventRecorderFor(constants.AdmissionName),
		scheduler.WithFairSharing(fairSharing),
		scheduler.WithPreemptionExpectations(expectations))
	if err := manager.Add(admitter); err != nil {
		return err
	}
	logger.Info("starting Kueue's core with fair sharing")
	return manager.Start(ctx)
}
