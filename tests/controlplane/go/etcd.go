package main

import (
	"errors"
	"net/url"
	"os"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// startEtcd runs a one-member etcd in this process, its client and peer listeners on ports the kernel picks, and
// returns it with the URL of its client listener. Like k8s.io/apiserver's own test server
// (staging/src/k8s.io/apiserver/pkg/storage/etcd3/testserver/test_server.go) it skips fsync: the store of one test
// run is never restarted.
func startEtcd(dir string) (*embed.Etcd, string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", err
	}
	cfg := embed.NewConfig()
	cfg.Name = "controlplane"
	cfg.Dir = dir
	cfg.UnsafeNoFsync = true
	cfg.LogLevel = "error"
	anyPort := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg.ListenPeerUrls = []url.URL{anyPort}
	cfg.AdvertisePeerUrls = []url.URL{anyPort}
	cfg.ListenClientUrls = []url.URL{anyPort}
	cfg.AdvertiseClientUrls = []url.URL{anyPort}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, "", err
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(time.Minute):
		e.Close()
		return nil, "", errors.New("not ready after a minute")
	}
	return e, "http://" + e.Clients[0].Addr().String(), nil
}
