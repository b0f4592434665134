package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// ferryImage is the name the manifests give ferry's image; kustomization.yaml
// maps it to the registry it was pushed to.
const ferryImage = "ferry"

// kustomization is the part of kustomize's Kustomization the example uses
// (decoded strictly: a field it does not know fails the test).
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
	} `json:"images"`
}

// The values a user edits are written once: the images in
// kustomization.yaml, the node count as NODES in the ConfigMap (which the
// Job's completions and parallelism must equal: Kubernetes reads them from
// nowhere else). The peer port is declared, a NetworkPolicy lets only the
// Job's pods reach it, and the peers' token comes from a Secret.
func TestKubernetesEditedOnce(t *testing.T) {
	p := loadTrainingPod(t)
	if len(p.m.kustomize) != 1 {
		t.Fatalf("%d Kustomizations, want one naming the images", len(p.m.kustomize))
	}
	k := p.m.kustomize[0]
	if !slices.Contains(k.Resources, "training-job.yaml") {
		t.Errorf("kustomization.yaml resources %v lack training-job.yaml", k.Resources)
	}
	images := map[string]string{}
	for _, im := range k.Images {
		images[im.Name] = im.NewName + ":" + im.NewTag
	}
	for _, c := range append(slices.Clone(p.spec.InitContainers), p.spec.Containers...) {
		if _, ok := images[c.Image]; !ok {
			t.Errorf("container %s: image %q is not named in kustomization.yaml's images", c.Name, c.Image)
		}
	}
	if p.restore.Image != ferryImage || p.agent.Image != ferryImage {
		t.Errorf("restore image %q, agent image %q: want %q, mapped once in kustomization.yaml", p.restore.Image, p.agent.Image, ferryImage)
	}

	// The node count.
	cm := p.m.configMaps["ferry"]
	if cm == nil || cm.Data["NODES"] == "" {
		t.Fatalf("the ConfigMap ferry has no NODES")
	}
	if got := fmt.Sprint(*p.job.Spec.Completions); got != cm.Data["NODES"] {
		t.Errorf("completions %s, NODES %s: the same number, please", got, cm.Data["NODES"])
	}
	raw := loadRawKubernetes(t)
	if n := strings.Count(raw, "\"2\""); n != 1 {
		t.Errorf("the node count \"2\" is written %d times; NODES alone should hold it", n)
	}
	if url := cm.Data["CHECKPOINTS"]; !strings.HasPrefix(url, "s3://") || strings.Count(raw, url) != 1 {
		t.Errorf("the bucket URL %q is written %d times; CHECKPOINTS alone should hold it", url, strings.Count(raw, url))
	}
	for _, c := range []*corev1.Container{p.restore, p.agent, p.trainer} {
		text := strings.Join(append(slices.Clone(c.Args), c.Command...), " ")
		for _, e := range c.Env {
			text += " " + e.Value
			if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
				text += " $(" + e.ValueFrom.ConfigMapKeyRef.Key + ")"
			}
		}
		if !strings.Contains(text, "NODES") {
			t.Errorf("container %s does not take the node count from NODES", c.Name)
		}
	}

	// The peer port and who may reach it.
	if !slices.ContainsFunc(p.restore.Ports, func(cp corev1.ContainerPort) bool { return cp.ContainerPort == 7077 }) {
		t.Errorf("ferry-restore restores with --peers but declares no port 7077")
	}
	ok := false
	for _, np := range p.m.policies {
		if np.Spec.PodSelector.MatchLabels["job-name"] != p.job.Name {
			continue
		}
		for _, in := range np.Spec.Ingress {
			for _, from := range in.From {
				if from.PodSelector != nil && from.PodSelector.MatchLabels["job-name"] == p.job.Name {
					ok = true
				}
			}
		}
	}
	if !ok {
		t.Errorf("no NetworkPolicy lets the Job's pods (and only them) reach each other's peer port")
	}
	renv, _ := envOf(t, p.restore, p.m.configMaps)
	tokenFile, fromSecret := renv["FERRY_PEER_TOKEN_FILE"], false
	for _, vm := range p.restore.VolumeMounts {
		if tokenFile == "" || !strings.HasPrefix(tokenFile, strings.TrimSuffix(vm.MountPath, "/")+"/") {
			continue
		}
		for _, v := range p.spec.Volumes {
			if v.Name == vm.Name && v.Secret != nil {
				fromSecret = true
			}
		}
	}
	if !fromSecret {
		t.Errorf("ferry-restore: the peers' token must be a file of a Secret volume (FERRY_PEER_TOKEN_FILE=%q)", tokenFile)
	}
	for _, a := range p.restore.Args {
		if strings.HasPrefix(a, "--peer-token") {
			t.Errorf("ferry-restore passes %s on its command line, where ps shows it", a)
		}
	}
}

// loadRawKubernetes is the text of every YAML file in deploy/kubernetes,
// comments left out.
func loadRawKubernetes(t *testing.T) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(kubernetesDir, "*.y*ml"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(commentLine.ReplaceAllString(string(data), ""))
	}
	return b.String()
}
