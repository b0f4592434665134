package units

import "testing"

func TestParseBytes(t *testing.T) {
	cases := map[string]int64{
		"64MiB": 64 << 20, "1GiB": 1 << 30, "5242880": 5242880, "64M": 64 << 20,
		"1.5 GiB": 3 << 29, "10kb": 10000, "0": 0, "2TiB": 2 << 40,
	}
	for in, want := range cases {
		got, err := ParseBytes(in)
		if err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "MiB", "-1MiB", "abc", "1.2.3G"} {
		if _, err := ParseBytes(bad); err == nil {
			t.Errorf("ParseBytes(%q) succeeded, want an error", bad)
		}
	}
}

func TestParseRate(t *testing.T) {
	got, err := ParseRate("800MiB/s")
	if err != nil || got != 800<<20 {
		t.Fatalf("ParseRate = %d, %v", got, err)
	}
	if _, err := ParseRate("fast"); err == nil {
		t.Fatal("ParseRate(fast) succeeded")
	}
}

func TestFormatBytes(t *testing.T) {
	cases := map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 3 << 29: "1.5 GiB"}
	for in, want := range cases {
		if got := FormatBytes(in); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", in, got, want)
		}
	}
}
