package config

import "testing"

func TestSecurityDefaults(t *testing.T) {
	c, err := Load(write(t, clusterFile))
	if err != nil {
		t.Fatal(err)
	}
	if c.Security.Dir != "/var/lib/basalt/security" || c.Security.Insecure {
		t.Errorf("security %+v, want dir <data_dir>/security, secure", c.Security)
	}
	c, err = Load(write(t, clusterFile+"[security]\ndir = \"/etc/basalt/pki\"\ninsecure = true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Security.Dir != "/etc/basalt/pki" || !c.Security.Insecure {
		t.Errorf("security %+v", c.Security)
	}
	if _, err := Load(write(t, clusterFile+"[security]\nsecure = true\n")); err == nil {
		t.Error("an unknown [security] key was accepted")
	}
}

func TestSecurityAPIKeys(t *testing.T) {
	c, err := Load(write(t, clusterFile+"[security]\nmetrics_public = true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Security.MetricsPublic || c.Security.JoinTokenFile != "" {
		t.Errorf("security %+v", c.Security)
	}
	if _, err := Load(write(t, clusterFile+"[security]\njoin_token_file = \"/t\"\n")); err == nil {
		t.Error("join_token_file without cluster.join was accepted")
	}
}
