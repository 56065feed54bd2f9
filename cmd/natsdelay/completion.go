package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/alecthomas/kong"
	"github.com/willabides/kongplete"
)

// Shell completion is kongplete's: the shell runs natsdelay itself with
// the command line in COMP_LINE, and complete answers from the same kong
// model that parses it, so the completions cannot drift from the flags.
// completionCmd prints the line that tells a shell to do so.
type completionCmd struct {
	Shell string `arg:"" enum:"bash,zsh,fish" help:"The shell: ${enum}."`
}

// completionScripts are the shells' lines, as kongplete installs them;
// ${bin} is this executable's path, ${cmd} its name.
var completionScripts = map[string]string{
	"bash": "complete -C ${bin} ${cmd}\n",
	"zsh":  "autoload -U +X bashcompinit && bashcompinit\ncomplete -C ${bin} ${cmd}\n",
	"fish": `function __complete_${cmd}
    set -lx COMP_LINE (commandline -cp)
    test -z (commandline -ct)
    and set COMP_LINE "$COMP_LINE "
    ${bin}
end
complete -f -c ${cmd} -a "(__complete_${cmd})"
`,
}

func (c *completionCmd) Help() string {
	return `Prints the shell code that completes natsdelay's commands, flags and values. Load it in the shell's startup file:

  bash (~/.bashrc):                  source <(natsdelay completion bash)
  zsh (~/.zshrc):                    source <(natsdelay completion zsh)
  fish (~/.config/fish/config.fish): natsdelay completion fish | source`
}

func (c *completionCmd) Run(e *env) error {
	bin, err := os.Executable()
	if err == nil {
		bin, err = filepath.Abs(bin)
	}
	if err != nil {
		return fmt.Errorf("find this executable's path: %w", err)
	}
	vars := map[string]string{"bin": shellQuote(bin), "cmd": "natsdelay"}
	_, err = fmt.Fprint(e.stdout, os.Expand(completionScripts[c.Shell], func(s string) string {
		if v, ok := vars[s]; ok {
			return v
		}
		return "$" + s
	}))
	return err
}

// shellQuote quotes s for the three shells when it needs it.
func shellQuote(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool {
		return !(r == '/' || r == '.' || r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// complete answers the shell when it asks for completions (COMP_LINE is
// set) and exits; otherwise it does nothing.
func complete(p *kong.Kong) { kongplete.Complete(p) }
