// Command gpu-pulse-controlplane runs Kubernetes' own control plane for gpu-pulse's tests, in one process: an
// embedded etcd, kube-apiserver (its aggregation layer, RBAC and service account tokens included) and three of
// kube-controller-manager's controllers, deployment, replicaset and horizontal-pod-autoscaler. No scheduler and no
// kubelet run: the test harness (tests/controlplane/cluster.py) binds the pods and writes their status as a kubelet
// would.
//
// Usage:
//
//	gpu-pulse-controlplane [own flags] -- [kube-apiserver flags]
//
// The kube-apiserver flags are kube-apiserver's own, passed through unchanged, except that --secure-port and
// --etcd-servers are this program's to set: the API server listens on 127.0.0.1 on a port the kernel picks, and
// talks to the embedded etcd. Once it serves, this program prints "serving kube-apiserver on https://ADDRESS".
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "gpu-pulse-controlplane: error: %v\n", err)
		os.Exit(2)
	}
}

func run(argv []string) error {
	own, apiserverArgs := splitArgs(argv)
	flags := pflag.NewFlagSet("gpu-pulse-controlplane", pflag.ContinueOnError)
	dataDir := flags.String("data-dir", "", "directory of the embedded etcd's data (required)")
	controllersKubeconfig := flags.String("controllers-kubeconfig", "",
		"kubeconfig of the controllers' root identity (kube-controller-manager's --kubeconfig); its server is "+
			"replaced by the address the API server bound (required)")
	controllers := newControllerOptions(flags)
	if err := flags.Parse(own); err != nil {
		return err
	}
	if *dataDir == "" || *controllersKubeconfig == "" {
		return errors.New("--data-dir and --controllers-kubeconfig are required")
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	etcd, etcdURL, err := startEtcd(*dataDir)
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	defer etcd.Close()

	apiserver, err := startAPIServer(ctx, apiserverArgs, etcdURL)
	if err != nil {
		return fmt.Errorf("kube-apiserver: %w", err)
	}
	root, err := clientcmd.BuildConfigFromFlags("", *controllersKubeconfig)
	if err != nil {
		return fmt.Errorf("--controllers-kubeconfig: %w", err)
	}
	root.Host = apiserver.url
	if err := apiserver.waitReady(ctx, root, 2*time.Minute); err != nil {
		return fmt.Errorf("kube-apiserver: %w", err)
	}
	fmt.Printf("serving kube-apiserver on %s\n", apiserver.url)

	if err := runControllers(ctx, root, controllers); err != nil {
		return fmt.Errorf("controllers: %w", err)
	}
	fmt.Println("controllers started: deployment, replicaset, horizontal-pod-autoscaler")

	select {
	case <-ctx.Done():
		klog.Info("stopping on signal")
	case err := <-apiserver.done:
		if err != nil {
			return fmt.Errorf("kube-apiserver stopped: %w", err)
		}
	case err := <-etcd.Err():
		return fmt.Errorf("etcd stopped: %w", err)
	}
	return nil
}

// splitArgs: this program's flags before "--", kube-apiserver's after it.
func splitArgs(argv []string) (own, rest []string) {
	for i, arg := range argv {
		if arg == "--" {
			return argv[:i], argv[i+1:]
		}
	}
	return argv, nil
}
