// Spec Example 3, the budget guard: with 0.88 of the session's 1.00 consumed, checkBudget(5.00)
// answers allowed: false, and consumeBudget(5.00) fails with −32002 Budget Exceeded.
//   node dist-examples/example3.js ws://NODE
import { BudgetExceeded } from 'agora-mesh';
import { check, nodeUrls, open, run, show } from './common.js';

run(async () => {
  const [url] = nodeUrls();
  check(url, 'a node URL');
  const hyperspace = await open(url);
  try {
    const { sessionId } = await hyperspace.state.createSession({ agentName: 'research-agent' });
    await hyperspace.guard.consumeBudget({ sessionId, amount: 0.88, description: 'search' });

    const checked = await hyperspace.guard.checkBudget({ sessionId, estimatedCost: 5.0 });
    show('guard.checkBudget', checked);
    check(checked.allowed === false, 'allowed: false');
    check(checked.remaining === 0.12 && checked.consumed === 0.88 && checked.limit === 1, 'remaining 0.12, consumed 0.88, limit 1.00');
    check(typeof checked.reason === 'string', 'a reason');

    try {
      await hyperspace.guard.consumeBudget({ sessionId, amount: 5.0, description: 'large-model-inference' });
      check(false, 'consumeBudget over the budget fails');
    } catch (e) {
      check(e instanceof BudgetExceeded, `BudgetExceeded, got ${String(e)}`);
      show('guard.consumeBudget → error', { code: e.code, message: e.message, data: e.data });
      check(e.code === -32002, 'code -32002');
      check(e.remaining === 0.12 && e.requested === 5 && e.limit === 1, 'data {remaining: 0.12, requested: 5.00, limit: 1.00}');
    }
  } finally {
    await hyperspace.close();
  }
});
