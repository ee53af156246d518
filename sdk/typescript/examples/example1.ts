// Spec Example 1, the agent session lifecycle, across two nodes: a provider on node B registers
// `web-search`; a client on node A creates a session, discovers the tool, invokes it, records
// the trajectory and ends the session.
//   node dist-examples/example1.js ws://NODE_A ws://NODE_B
import { check, nodeUrls, open, poll, run, show } from './common.js';

run(async () => {
  const [urlA, urlB] = nodeUrls();
  check(urlA, 'a node URL');
  const provider = await open(urlB ?? urlA);
  const hyperspace = await open(urlA);
  try {
    const { toolId } = await provider.tool.register(
      {
        name: 'web-search',
        description: 'Full-text web search',
        capabilities: ['search'],
        inputSchema: { type: 'object', properties: { query: { type: 'string' } } },
        outputSchema: { type: 'object', properties: { results: { type: 'array' } } },
      },
      async ({ query }: { query: string }) => ({
        results: [{ title: `About ${query}`, url: '...', snippet: '...' }],
      }),
    );
    const providerPeer = (await provider.node.info()).peerId;

    // 1. Create session
    const session = await hyperspace.state.createSession({
      agentName: 'research-agent',
      agentType: 'autonomous',
      model: 'gemma-3-12b',
    });
    show('1. state.createSession', session);
    check(typeof session.sessionId === 'string' && session.sessionId !== '', 'a sessionId');
    check(!Number.isNaN(Date.parse(session.createdAt)), 'createdAt is a date');

    // Before the spec's exchange: the tool earns a track record. A new tool has the prior
    // reputation 0.5; six successful calls from A make it (6 + 2) / (6 + 4) = 0.8 there.
    await poll(
      async () => (await hyperspace.tool.discover({ query: 'web search' })).tools.find((t) => t.id === toolId),
      20_000,
      'node A learns node B\'s tool',
    );
    for (let i = 0; i < 6; i++) await hyperspace.tool.invoke({ toolId, params: { query: 'warm-up' } });

    // 2. Discover tool, as the spec writes it
    const found = await hyperspace.tool.discover({ query: 'web search', minReputation: 0.8 });
    const tool = found.tools.find((t) => t.id === toolId);
    check(tool !== undefined, 'tool.discover {query, minReputation: 0.8} finds web-search');
    check(tool.reputation >= 0.8, 'its reputation is at least minReputation');
    show('2. tool.discover', { tools: [tool] });
    check(tool.name === 'web-search', 'the tool is web-search');
    check(tool.peerId === providerPeer, 'the tool is on node B');

    // 3. Invoke tool
    const invoked = await hyperspace.tool.invoke({
      toolId,
      params: { query: 'solid-state battery breakthroughs 2026' },
      sessionId: session.sessionId,
    });
    show('3. tool.invoke', invoked);
    const results = (invoked.result as { results?: unknown[] }).results;
    check(Array.isArray(results) && results.length === 1, 'the provider answered results');
    check(invoked.peerId === providerPeer, 'node B ran it');
    check(Number.isInteger(invoked.duration) && invoked.duration >= 0, 'a duration in ms');

    // 4. Record trajectory & end session
    const recorded = await hyperspace.improving.recordTrajectory({
      taskType: 'web-research',
      input: { query: 'solid-state battery breakthroughs 2026' },
      output: { summary: '...', confidence: 0.91 },
      steps: [
        { action: 'discover', tool: 'tool.discover', duration: 45 },
        { action: 'search', tool: 'web-search', duration: invoked.duration },
        { action: 'synthesize', tool: 'summarizer', duration: 720 },
      ],
      reward: 0.91,
    });
    show('4. improving.recordTrajectory', recorded);
    check(/^traj-/.test(recorded.trajectoryId), 'a trajectory id');
    check(recorded.state === 'SUCCESS', 'state SUCCESS');
    check(typeof recorded.gossipedTo === 'number', 'gossipedTo is a number');
    const ended = await hyperspace.state.endSession({ sessionId: session.sessionId });
    show('   state.endSession', ended);
    check(ended.ended === true && typeof ended.duration === 'number', '{ended: true, duration}');
  } finally {
    await hyperspace.close();
    await provider.close();
  }
});
