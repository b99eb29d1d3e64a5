package kube

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// ClientConfig is how weftd reaches the API server: apiURL and kubeconfig as
// --kube-api-url and --kubeconfig-file give them or, with neither, the in-cluster
// config of the pod weftd runs in, as flanneld finds it; weftd's user agent, in
// protobuf.
func ClientConfig(apiURL, kubeconfig string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if apiURL == "" && kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags(apiURL, kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("client config: %w", err)
	}
	cfg.UserAgent = "weftd"
	cfg.ContentType = protobufType
	cfg.AcceptContentTypes = protobufType + ",application/json"
	return cfg, nil
}

// ConfigMapValue reads key of the ConfigMap namespace/name (kube-flannel's
// kube-flannel/kube-flannel-cfg holds net-conf.json) with one get: the only right it
// needs is get on that ConfigMap.
func ConfigMapValue(ctx context.Context, cfg *rest.Config, namespace, name, key string) ([]byte, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	cm, err := cs.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("ConfigMap %s/%s: %w", namespace, name, err)
	}
	if v, ok := cm.Data[key]; ok {
		return []byte(v), nil
	}
	if v, ok := cm.BinaryData[key]; ok {
		return v, nil
	}
	return nil, fmt.Errorf("ConfigMap %s/%s has no key %q", namespace, name, key)
}
