package cli

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
)

// benchProfiles writes Go pprof profiles of a bench run: a CPU profile for
// the whole run (cpu) and an allocation profile taken at its end (mem), each
// only when its path is set. Read them with `go tool pprof BINARY FILE`.
type benchProfiles struct {
	cpu, mem string
	cpuFile  *os.File
}

// start begins the CPU profile. The allocation profile samples at the
// runtime's default rate (one sample per 512 KiB allocated, scaled up by
// pprof), which does not slow the run.
func (p *benchProfiles) start() error {
	if p.cpu == "" {
		return nil
	}
	f, err := os.Create(p.cpu)
	if err != nil {
		return fmt.Errorf("bench: --cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("bench: --cpuprofile: %w", err)
	}
	p.cpuFile = f
	return nil
}

// stop ends the CPU profile and writes the allocation profile.
func (p *benchProfiles) stop() error {
	var errs []error
	if p.cpuFile != nil {
		pprof.StopCPUProfile()
		errs = append(errs, p.cpuFile.Close())
		p.cpuFile = nil
	}
	if p.mem != "" {
		f, err := os.Create(p.mem)
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("bench: --memprofile: %w", err))...)
		}
		runtime.GC() // in-use figures as of now, not of the last cycle
		errs = append(errs, pprof.Lookup("allocs").WriteTo(f, 0), f.Close())
	}
	return errors.Join(errs...)
}
