// Shared by the examples: node URLs from argv or the environment, assertions, output.
import { connect, type Hyperspace } from 'agora-mesh';

// The part of Node's `process` the examples use (so they compile without @types/node).
declare const process: {
  argv: string[];
  env: Record<string, string | undefined>;
  exit(code: number): never;
};

/** The JSON-RPC URLs: the command line's arguments, else AGORA_RPC_URLS (comma-separated), else
 * AGORA_RPC, else the default port on loopback. */
export function nodeUrls(): string[] {
  const args = process.argv.slice(2).filter((a) => !a.startsWith('-'));
  if (args.length > 0) return args;
  const env = process.env.AGORA_RPC_URLS ?? process.env.AGORA_RPC;
  if (env) return env.split(',').map((s) => s.trim()).filter(Boolean);
  return ['ws://127.0.0.1:3100'];
}

/** Connects with the API key of AGORA_API_KEY, when set. */
export function open(url: string): Promise<Hyperspace> {
  const apiKey = process.env.AGORA_API_KEY;
  return connect(url, apiKey ? { apiKey } : {});
}

/** Throws when `cond` is false: the example then exits with status 1. */
export function check(cond: unknown, what: string): asserts cond {
  if (!cond) throw new Error(`assertion failed: ${what}`);
}

/** Prints a step and what the node answered. */
export function show(step: string, value: unknown): void {
  console.log(`${step}\n${JSON.stringify(value, null, 2)}`);
}

/** Polls `f` every 50 ms until it returns a value other than undefined, for up to `ms`. */
export async function poll<T>(f: () => Promise<T | undefined>, ms: number, what: string): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await f();
    if (v !== undefined) return v;
    if (Date.now() >= deadline) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Runs an example: exit 0 when it completes, 1 with the error otherwise. */
export function run(main: () => Promise<void>): void {
  main().then(
    () => process.exit(0),
    (e: unknown) => {
      console.error(e instanceof Error ? `${e.name}: ${e.message}` : e);
      process.exit(1);
    },
  );
}
