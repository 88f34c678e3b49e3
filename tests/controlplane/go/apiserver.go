package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	basecompatibility "k8s.io/component-base/compatibility"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
)

// ownedFlags: kube-apiserver flags that this program sets itself.
var ownedFlags = []string{"secure-port", "bind-address", "etcd-servers"}

type apiServer struct {
	url  string
	done chan error
}

// startAPIServer runs kube-apiserver's own Run with the options its command line gives, as cmd/kube-apiserver/app's
// NewAPIServerCommand does, except for the listener: bound here on 127.0.0.1 with a port the kernel picks and handed
// over through SecureServingOptions.Listener, as cmd/kube-apiserver/app/testing/testserver.go's StartTestServer does.
func startAPIServer(ctx context.Context, args []string, etcdURL string) (*apiServer, error) {
	s := options.NewServerRunOptions()
	fs := pflag.NewFlagSet("kube-apiserver", pflag.ContinueOnError)
	named := s.Flags()
	for _, set := range named.FlagSets {
		fs.AddFlagSet(set)
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	for _, name := range ownedFlags {
		if fs.Changed(name) {
			return nil, fmt.Errorf("--%s is set by gpu-pulse-controlplane, not on its command line", name)
		}
	}
	if err := s.GenericServerRunOptions.ComponentGlobalsRegistry.Set(); err != nil {
		return nil, err
	}
	featureGate := s.GenericServerRunOptions.ComponentGlobalsRegistry.FeatureGateFor(basecompatibility.DefaultKubeComponent)
	if err := logsapi.ValidateAndApply(s.Logs, featureGate); err != nil {
		return nil, err
	}
	// kube-apiserver's loopback clients should not log warnings it issued itself (as NewAPIServerCommand)
	rest.SetDefaultWarningHandler(rest.NoWarnings{})

	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	address := listener.Addr().(*net.TCPAddr)
	s.SecureServing.Listener = listener
	s.SecureServing.BindAddress = address.IP
	s.SecureServing.BindPort = address.Port
	s.SecureServing.ExternalAddress = address.IP
	// a loopback address cannot be the kubernetes Service's endpoint: no reconciliation, as StartTestServer does
	if !fs.Changed("advertise-address") && !fs.Changed("endpoint-reconciler-type") {
		s.EndpointReconcilerType = "none"
	}
	s.Etcd.StorageConfig.Transport.ServerList = []string{etcdURL}

	completed, err := s.Complete(ctx)
	if err != nil {
		return nil, err
	}
	if errs := completed.Validate(); len(errs) != 0 {
		return nil, utilerrors.NewAggregate(errs)
	}
	server := &apiServer{url: "https://" + address.String(), done: make(chan error, 1)}
	go func() { server.done <- app.Run(ctx, completed) }()
	return server, nil
}

// waitReady polls /readyz with the controllers' identity until it answers "ok".
func (s *apiServer) waitReady(ctx context.Context, config *rest.Config, timeout time.Duration) error {
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-s.done:
			if err == nil {
				err = errors.New("stopped")
			}
			return false, err
		default:
		}
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			last = fmt.Errorf("%w: %s", err, body)
			return false, nil
		}
		return string(body) == "ok", nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("%w (last answer: %v)", err, last)
	}
	return err
}
