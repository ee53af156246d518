// Spec Example 2, collective learning: a trajectory recorded on node A becomes an exemplar on
// node B, with A's PeerId. Both nodes must follow the task type (`--improving-task-type
// web-research`) and A must share its runs (`--improving-share`).
//   node dist-examples/example2.js ws://NODE_A ws://NODE_B
import { check, nodeUrls, open, poll, run, show } from './common.js';

run(async () => {
  const [urlA, urlB] = nodeUrls();
  check(urlA && urlB, 'two node URLs');
  const a = await open(urlA);
  const b = await open(urlB);
  try {
    const peerA = (await a.node.info()).peerId;
    const query = `solid-state battery breakthroughs ${Date.now()}`;
    const recorded = await a.improving.recordTrajectory({
      taskType: 'web-research',
      input: { query },
      output: { summary: '...', confidence: 0.91 },
      steps: [
        { action: 'discover', tool: 'tool.discover', duration: 45 },
        { action: 'search', tool: 'web-search', duration: 195 },
        { action: 'synthesize', tool: 'summarizer', duration: 720 },
      ],
      reward: 0.91,
    });
    show('on A: improving.recordTrajectory', recorded);
    check(recorded.state === 'SUCCESS', 'recorded as SUCCESS');

    // 1. Get Exemplars (includes Agent A's trajectory)
    const got = await poll(
      async () => {
        const r = await b.improving.getExemplars({ taskType: 'web-research', limit: 3, minReward: 0.8 });
        return r.exemplars.some((e) => e.trajectoryId === recorded.trajectoryId) ? r : undefined;
      },
      20_000,
      "A's trajectory reaches B's library",
    );
    show('on B: improving.getExemplars', got);
    const e = got.exemplars.find((x) => x.trajectoryId === recorded.trajectoryId);
    check(e, 'the exemplar is there');
    check(e.peerId === peerA, "the exemplar carries A's PeerId");
    check(e.reward === 0.91, 'reward 0.91');
    check(e.steps.length === 3, 'three steps');
    check(typeof e.utilityScore === 'number' && typeof e.usageCount === 'number', 'utilityScore and usageCount');
    check(got.librarySize >= 1 && typeof got.avgReward === 'number', 'librarySize and avgReward');
  } finally {
    await a.close();
    await b.close();
  }
});
