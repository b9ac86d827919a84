-- Argo CD health of a Kagenti resource (kagenti.io/v1alpha1: TokenExchange, AgentTrace, AgentCard,
-- AgentBuild). Every pillar writes the same status model (pkg/duck Status): observedGeneration,
-- Ready as the summary, Reconciling and Stalled present only while True (the kstatus conventions
-- Flux uses). For every state that model produces, this script reaches the verdict kstatus reaches
-- (pkg/duck status_test.go runs both over one table); a Ready=False without Reconciling or Stalled,
-- which the model never writes, is Progressing here where kstatus would say Current.
local hs = {status = "Progressing", message = "Waiting for the controller to report status"}
if obj.status == nil then
  return hs
end
local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and (observed == nil or observed < generation) then
  hs.message = "Waiting for the controller to observe generation " .. generation
  return hs
end
local ready = nil
local reconciling = nil
if obj.status.conditions ~= nil then
  for _, condition in ipairs(obj.status.conditions) do
    if condition.type == "Stalled" and condition.status == "True" then
      return {status = "Degraded", message = (condition.reason or "") .. ": " .. (condition.message or "")}
    elseif condition.type == "Reconciling" and condition.status == "True" then
      reconciling = condition
    elseif condition.type == "Ready" then
      ready = condition
    end
  end
end
if reconciling ~= nil then
  return {status = "Progressing", message = (reconciling.reason or "") .. ": " .. (reconciling.message or "")}
end
if ready ~= nil and ready.status == "True" then
  return {status = "Healthy", message = ready.message or ""}
end
if ready ~= nil then
  hs.message = (ready.reason or "") .. ": " .. (ready.message or "")
end
return hs
