package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/scale"
	"k8s.io/controller-manager/pkg/clientbuilder"
	"k8s.io/kubernetes/pkg/controller/deployment"
	"k8s.io/kubernetes/pkg/controller/podautoscaler"
	"k8s.io/kubernetes/pkg/controller/podautoscaler/metrics"
	"k8s.io/kubernetes/pkg/controller/replicaset"
	resourceclient "k8s.io/metrics/pkg/client/clientset/versioned/typed/metrics/v1beta1"
	"k8s.io/metrics/pkg/client/custom_metrics"
	"k8s.io/metrics/pkg/client/external_metrics"
)

// controllerOptions: kube-controller-manager's flags for the three controllers, with its names and defaults
// (cmd/kube-controller-manager/app/options/hpacontroller.go, deploymentcontroller.go, replicasetcontroller.go;
// the defaults from pkg/controller/podautoscaler/config/v1alpha1/defaults.go).
type controllerOptions struct {
	hpaSyncPeriod          time.Duration
	hpaDownscaleWindow     time.Duration
	hpaTolerance           float64
	hpaCPUInitialization   time.Duration
	hpaInitialReadiness    time.Duration
	concurrentHPASyncs     int
	concurrentDeployments  int
	concurrentReplicaSets  int
	restMapperResetPeriod  time.Duration
	informerResyncInterval time.Duration
}

func newControllerOptions(fs *pflag.FlagSet) *controllerOptions {
	o := &controllerOptions{}
	fs.DurationVar(&o.hpaSyncPeriod, "horizontal-pod-autoscaler-sync-period", 15*time.Second,
		"the period for syncing the number of pods in horizontal pod autoscaler")
	fs.DurationVar(&o.hpaDownscaleWindow, "horizontal-pod-autoscaler-downscale-stabilization", 5*time.Minute,
		"the period for which the autoscaler looks backwards and does not scale down below any recommendation it made")
	fs.Float64Var(&o.hpaTolerance, "horizontal-pod-autoscaler-tolerance", 0.1,
		"the minimum change (from 1.0) in the desired-to-actual metrics ratio for the autoscaler to consider scaling")
	fs.DurationVar(&o.hpaCPUInitialization, "horizontal-pod-autoscaler-cpu-initialization-period", 5*time.Minute,
		"the period after pod start when CPU samples might be skipped")
	fs.DurationVar(&o.hpaInitialReadiness, "horizontal-pod-autoscaler-initial-readiness-delay", 30*time.Second,
		"the period after pod start during which readiness changes are treated as initial readiness")
	fs.IntVar(&o.concurrentHPASyncs, "concurrent-horizontal-pod-autoscaler-syncs", 5,
		"the number of horizontal pod autoscaler objects allowed to sync concurrently")
	fs.IntVar(&o.concurrentDeployments, "concurrent-deployment-syncs", 5,
		"the number of deployment objects allowed to sync concurrently")
	fs.IntVar(&o.concurrentReplicaSets, "concurrent-replicaset-syncs", 5,
		"the number of replica sets allowed to sync concurrently")
	// kube-controller-manager resets its discovery REST mapper every 30 s (cmd/kube-controller-manager/app/
	// controllermanager.go, CreateControllerContext)
	o.restMapperResetPeriod = 30 * time.Second
	// kube-controller-manager's --min-resync-period is 12 h: informers do not resync within a test
	o.informerResyncInterval = 12 * time.Hour
	return o
}

// runControllers starts the deployment, replicaset and horizontal-pod-autoscaler controllers as
// kube-controller-manager starts them with --use-service-account-credentials (cmd/kube-controller-manager/app/
// apps.go, autoscaling.go): each under its own service account in kube-system, whose token the root identity
// requests, so that the bootstrap RBAC roles system:controller:<name> are what authorizes them.
func runControllers(ctx context.Context, root *rest.Config, o *controllerOptions) error {
	rootClient, err := kubernetes.NewForConfig(rest.AddUserAgent(root, "gpu-pulse-controlplane"))
	if err != nil {
		return err
	}
	// the shared informers and discovery under the root identity, each controller under its own account
	// (cmd/kube-controller-manager/app/controllermanager.go, CreateControllerContext)
	rootBuilder := clientbuilder.SimpleControllerClientBuilder{ClientConfig: root}
	builder := clientbuilder.NewDynamicClientBuilder(rest.AnonymousClientConfig(root), rootClient.CoreV1(), "kube-system")

	sharedClient, err := rootBuilder.Client("shared-informers")
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactory(sharedClient, o.informerResyncInterval)

	discoveryClient, err := rootBuilder.DiscoveryClient("controller-discovery")
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(discoveryClient))
	go wait.Until(mapper.Reset, o.restMapperResetPeriod, ctx.Done())

	deploymentClient, err := builder.Client("deployment-controller")
	if err != nil {
		return err
	}
	deployments, err := deployment.NewDeploymentController(ctx,
		factory.Apps().V1().Deployments(), factory.Apps().V1().ReplicaSets(), factory.Core().V1().Pods(),
		deploymentClient)
	if err != nil {
		return fmt.Errorf("deployment controller: %w", err)
	}

	replicaSetClient, err := builder.Client("replicaset-controller")
	if err != nil {
		return err
	}
	replicaSets := replicaset.NewReplicaSetController(ctx,
		factory.Apps().V1().ReplicaSets(), factory.Core().V1().Pods(), replicaSetClient, replicaset.BurstReplicas)

	hpa, err := newHorizontalController(ctx, builder, factory, mapper, o)
	if err != nil {
		return fmt.Errorf("horizontal-pod-autoscaler controller: %w", err)
	}

	factory.Start(ctx.Done())
	go deployments.Run(ctx, o.concurrentDeployments)
	go replicaSets.Run(ctx, o.concurrentReplicaSets)
	go hpa.Run(ctx, o.concurrentHPASyncs)
	return nil
}

// newHorizontalController: as newHorizontalPodAutoscalerController in
// cmd/kube-controller-manager/app/autoscaling.go builds it, metrics read through the aggregated metrics APIs.
func newHorizontalController(
	ctx context.Context,
	builder clientbuilder.ControllerClientBuilder,
	factory informers.SharedInformerFactory,
	mapper *restmapper.DeferredDiscoveryRESTMapper,
	o *controllerOptions,
) (*podautoscaler.HorizontalController, error) {
	const name = "horizontal-pod-autoscaler"
	config, err := builder.Config(name)
	if err != nil {
		return nil, err
	}
	client, err := builder.Client(name)
	if err != nil {
		return nil, err
	}
	apiVersions := custom_metrics.NewAvailableAPIsGetter(client.Discovery())
	// as kube-controller-manager: discovery of the metrics APIs is at most two sync periods old
	go custom_metrics.PeriodicallyInvalidate(apiVersions, o.hpaSyncPeriod, ctx.Done())
	resourceMetrics, err := resourceclient.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	externalMetrics, err := external_metrics.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	metricsClient := metrics.NewRESTMetricsClient(resourceMetrics,
		custom_metrics.NewForConfig(config, mapper, apiVersions), externalMetrics)

	scaleKinds := scale.NewDiscoveryScaleKindResolver(client.Discovery())
	scaleClient, err := scale.NewForConfig(config, mapper, dynamic.LegacyAPIPathResolverFunc, scaleKinds)
	if err != nil {
		return nil, err
	}
	return podautoscaler.NewHorizontalController(ctx,
		client.CoreV1(), scaleClient, client.AutoscalingV2(), mapper, metricsClient,
		factory.Autoscaling().V2().HorizontalPodAutoscalers(), factory.Core().V1().Pods(),
		o.hpaSyncPeriod, o.hpaDownscaleWindow, o.hpaTolerance, o.hpaCPUInitialization, o.hpaInitialReadiness,
	), nil
}
